"""What the Runs page draws: the run table's rows, a run's curves (loss, accuracy, learning rate, probe accuracy,
effective rank) and its checkpoints, from the summaries and records of :mod:`lab.runs.catalog`.

Curves are :class:`~lab.ui.views.live_curves.SeriesFigure` (new points streamed into the sources, the ranges refitted
around the data), and a figure is offered for display only once it has points: a run without evaluations shows no
empty accuracy plot, a run without a probe no probe plot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import panel as pn

from lab.ui.text import md
from lab.ui.views.live_curves import LiveCurves, SeriesFigure, finite

COLUMNS = ("run", "model", "state", "progress", "metrics", "heartbeat", "problems")
_FIRST = ("loss", "test_acc", "train_acc", "probe_top1", "rank", "test_loss", "train_loss", "lr")


# -- table ---------------------------------------------------------------------------------------------------------
def format_age(seconds: float | None) -> str:
    """``12 s ago``, ``4 min ago``, ``3 h ago``, ``2 d ago``; ``never`` for None."""
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def format_clock(when: float | None, now: float | None = None) -> str:
    """The local time of ``when`` (Unix seconds): ``18:42:05`` on the day of ``now``, ``2026-11-30 18:42`` before
    it; ``never`` for None.

    The run table shows its heartbeats this way rather than as an age: a cell that changed every second would
    replace the table's rows on every refresh, and a click landing while the browser redraws them would be lost.
    """
    if when is None:
        return "never"
    moment = datetime.fromtimestamp(when)
    today = datetime.fromtimestamp(time.time() if now is None else now).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M")


def format_progress(step: int | None, total: int | None) -> str:
    """``120 / 400 (30%)``, ``step 120`` without a total, empty before the first step."""
    if step is None:
        return ""
    if total:
        return f"{step} / {total} ({100 * step / total:.0f}%)"
    return f"step {step}"


def format_value(value: float) -> str:
    """Four significant digits; scientific notation for very small or large magnitudes."""
    return f"{value:.3e}" if value and not 1e-3 <= abs(value) < 1e5 else f"{value:.4g}"


def format_metrics(metrics: dict[str, float], limit: int = 3) -> str:
    """The newest metrics in a few words: loss, accuracies, probe and rank first (``loss 0.0123 · test_acc 0.953``)."""
    names = [n for n in _FIRST if n in metrics] + sorted(n for n in metrics if n not in _FIRST)
    return " · ".join(f"{n} {format_value(metrics[n])}" for n in names[:limit])


def format_state(summary: dict[str, Any]) -> str:
    """The state, ``running (stale)`` when its heartbeat is old."""
    return f"{summary['state']} (stale)" if summary.get("stale") else summary["state"]


def table_frame(summaries: Sequence[dict[str, Any]], keys: Sequence[str], now: float | None = None) -> pd.DataFrame:
    """One row per run (:func:`lab.runs.catalog.RunReader.summary`), named by ``keys``; the columns of
    :data:`COLUMNS`, as text. A row changes only when its run's files do (the heartbeat as a time, not an age)."""
    rows = [{"run": key, "model": s["model"], "state": format_state(s),
             "progress": format_progress(s["step"], s["total_steps"]), "metrics": format_metrics(s["metrics"], limit=2),
             "heartbeat": format_clock(s["heartbeat"], now), "problems": "; ".join(s["problems"])}
            for key, s in zip(keys, summaries, strict=True)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def format_size(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def checkpoints_markdown(checkpoints: Sequence[dict[str, Any]], now: float | None = None) -> str:
    """A Markdown table of :meth:`lab.runs.catalog.RunReader.checkpoints` (their file names as text)."""
    if not checkpoints:
        return "No checkpoint yet (`checkpoints/` holds no `.pt` file)."
    now = time.time() if now is None else now
    lines = ["| checkpoint | size | step | modified |", "| --- | --- | --- | --- |"]
    for c in checkpoints:
        when = datetime.fromtimestamp(c["modified"]).strftime("%Y-%m-%d %H:%M:%S")
        step = "unreadable" if c["step"] is None else c["step"]
        lines.append(f"| {md(c['name'], one_line=True)} | {format_size(c['size'])} | {step} | {when} "
                     f"({format_age(max(0.0, now - c['modified']))}) |")
    return "\n".join(lines)


# -- curves --------------------------------------------------------------------------------------------------------
def clean_record(record: dict[str, Any]) -> dict[str, Any] | None:
    """``record`` with only its ``kind`` and its finite numeric fields; None without a finite numeric ``step``."""
    if not finite(record.get("step")):
        return None
    return {"kind": str(record.get("kind", "")), **{k: v for k, v in record.items() if finite(v)}}


class RunCurves:
    """A run's curves from its metric records: loss and train/test accuracy (:class:`LiveCurves`), the learning
    rate, linear-probe accuracy (``probe_top1`` and other ``probe…`` fields) and effective rank (``rank…``)."""

    def __init__(self, width: int = 360, height: int = 200) -> None:
        self.live = LiveCurves(width, height)
        self.extra = {"lr": SeriesFigure("Learning rate", "lr", lambda f: f == "lr", width, height),
                      "probe": SeriesFigure("Linear probe accuracy", "accuracy", lambda f: f.startswith("probe"),
                                            width, height),
                      "rank": SeriesFigure("Effective rank", "rank", lambda f: f.startswith("rank"), width, height)}

    def extend(self, records: Sequence[dict[str, Any]]) -> None:
        """Append what ``records`` hold (records without a numeric step, and values that are not finite numbers,
        are left out: a foreign or damaged file cannot break a figure)."""
        records = [r for r in map(clean_record, records) if r is not None]
        self.live.extend(records)
        for fig in self.extra.values():
            fig.extend(records)

    def clear(self) -> None:
        self.live.clear()
        for fig in self.extra.values():
            fig.clear()

    def panes(self) -> list[pn.pane.Bokeh]:
        """The figures that have points, in a fixed order (loss, accuracy, learning rate, probe, rank)."""
        return [fig.pane for fig in (*self.live.series.values(), *self.extra.values()) if fig.has_data]

    def points(self) -> dict[str, int]:
        """Points per curve: LiveCurves' ``kind:field`` names, then ``figure:kind:field`` of the others."""
        return {**self.live.points(), **{f"{name}:{k}": n for name, fig in self.extra.items()
                                         for k, n in fig.points().items()}}
