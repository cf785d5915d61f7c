"""What the Runs page draws: the run table's rows, a run's curves (loss, accuracy, learning rate, probe accuracy,
effective rank) and its checkpoints, from the summaries and records of :mod:`lab.runs.catalog`.

Curves grow in place as :class:`~lab.ui.views.live_curves.LiveCurves` does (new points are streamed into the sources,
the ranges refitted around the data), and a figure is offered for display only once it has points: a run without
evaluations shows no empty accuracy plot, a run without a probe no probe plot.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, Range1d
from bokeh.plotting import figure

from lab.ui.text import md
from lab.ui.views.live_curves import LiveCurves
from lab.ui.views.ranges import finite_range, set_range
from lab.ui.views.thinned import Thinned
from lab.viz.palette import BLUE, ORANGE

COLUMNS = ("run", "model", "state", "progress", "metrics", "heartbeat", "problems")
COLORS = (BLUE, ORANGE, "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22", "#d62728")
MAX_LINES = 10  # per figure: a run that logs the rank of every layer shows the first ten
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
def _finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (not a boolean, not an integer beyond float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def clean_record(record: dict[str, Any]) -> dict[str, Any] | None:
    """``record`` with only its ``kind`` and its finite numeric fields; None without a finite numeric ``step``."""
    if not _finite(record.get("step")):
        return None
    return {"kind": str(record.get("kind", "")), **{k: v for k, v in record.items() if _finite(v)}}


class SeriesFigure:
    """Lines against step for every record field that ``match`` accepts; a line appears with its field's first value.

    Args:
        title: the figure's title.
        y_label: its y axis label.
        match: ``match(field)`` says whether a field is drawn here.
        width, height: plot area in screen pixels.
    """

    def __init__(self, title: str, y_label: str, match: Callable[[str], bool], width: int = 360,
                 height: int = 200) -> None:
        self.match = match
        self.figure = figure(title=title, x_axis_label="step", y_axis_label=y_label, x_range=Range1d(0, 1),
                             y_range=Range1d(0, 1), frame_width=width, frame_height=height,
                             tools="pan,wheel_zoom,box_zoom,reset")
        self.figure.add_tools(HoverTool(tooltips=[("", "$name"), ("step", "@step"), ("value", "@value{0.0000}")]))
        self.legend = Legend(items=[], location="top_left", background_fill_alpha=0.0)
        self.figure.add_layout(self.legend, "right")
        self.sources: dict[tuple[str, str], ColumnDataSource] = {}
        self._curves: dict[tuple[str, str], Thinned] = {}  # each source, its points bounded
        self._x = self._y = (math.inf, -math.inf)
        self.pane = pn.pane.Bokeh(self.figure)

    @property
    def has_data(self) -> bool:
        return any(len(s.data["step"]) for s in self.sources.values())

    def _source(self, kind: str, field: str) -> ColumnDataSource | None:
        key = (kind, field)
        if key not in self.sources:
            if len(self.sources) >= MAX_LINES:
                return None
            label = field if not any(f == field for _, f in self.sources) else f"{field} ({kind})"
            source = ColumnDataSource(data={"step": [], "value": []}, name=f"{self.figure.title.text}:{field}")
            color = COLORS[len(self.sources) % len(COLORS)]
            line = self.figure.line("step", "value", source=source, line_width=2, name=label,
                                    color=color)
            renderers = [line]
            if kind != "step":  # evaluations are sparse: a dot shows each, the first one before any line can
                renderers.append(self.figure.scatter("step", "value", source=source, color=color, size=6, name=label))
            self.legend.items = [*self.legend.items, LegendItem(label=label, renderers=renderers)]
            self.sources[key] = source
            self._curves[key] = Thinned(source)
        return self.sources[key]

    def extend(self, records: Sequence[dict[str, Any]]) -> None:
        """Append the finite numeric values of matching fields of ``records`` (records without a step are skipped)."""
        points: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        for r in records:
            step = r.get("step")
            if not _finite(step):
                continue
            for field, value in r.items():
                if field != "step" and self.match(field) and _finite(value):
                    xs, ys = points.setdefault((str(r.get("kind", "")), field), ([], []))
                    xs.append(step)
                    ys.append(value)
        if not points:
            return
        with pn.io.unlocked():  # a widget callback runs without the document lock
            for (kind, field), (xs, ys) in points.items():
                source = self._source(kind, field)
                if source is not None:
                    self._curves[(kind, field)].stream(xs, ys)
                    self._x = (min(self._x[0], *xs), max(self._x[1], *xs))
                    self._y = (min(self._y[0], *ys), max(self._y[1], *ys))
            self._fit()

    def _fit(self) -> None:
        if not math.isfinite(self._x[0]):
            return
        set_range(self.figure.x_range, finite_range(self._x, pad=0.02, least=1.0))
        set_range(self.figure.y_range, finite_range(self._y))

    def clear(self) -> None:
        """Forget every point (its lines stay, empty, for the next run's fields of the same names)."""
        self._x = self._y = (math.inf, -math.inf)
        with pn.io.unlocked():
            for curve in self._curves.values():
                curve.clear()
            self.figure.x_range.update(start=0, end=1)

    def points(self) -> dict[str, int]:
        return {f"{kind}:{field}": len(s.data["step"]) for (kind, field), s in self.sources.items()}


class RunCurves:
    """A run's curves from its metric records: loss and train/test accuracy (:class:`LiveCurves`), the learning
    rate, linear-probe accuracy (``probe_top1`` and other ``probe…`` fields) and effective rank (``rank…``)."""

    def __init__(self, width: int = 360, height: int = 200) -> None:
        self.live = LiveCurves(width, height)
        self.extra = {"lr": SeriesFigure("Learning rate", "lr", lambda f: f == "lr", width, height),
                      "probe": SeriesFigure("Linear probe accuracy", "accuracy", lambda f: f.startswith("probe"),
                                            width, height),
                      "rank": SeriesFigure("Effective rank", "rank", lambda f: f.startswith("rank"), width, height)}
        self._live_panes = dict(zip(self.live.figures, self.live.pane, strict=True))  # loss, accuracy

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
        sources = self.live.sources.values()
        out = [pane for name, pane in self._live_panes.items()
               if any(len(s.data["step"]) for s in sources if s.name.startswith(f"{name}:"))]
        return out + [fig.pane for fig in self.extra.values() if fig.has_data]

    def points(self) -> dict[str, int]:
        """Points per curve: LiveCurves' ``kind:field`` names, then ``figure:kind:field`` of the others."""
        return {**self.live.points(), **{f"{name}:{k}": n for name, fig in self.extra.items()
                                         for k, n in fig.points().items()}}
