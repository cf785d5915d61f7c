"""Runs side by side: the settings in which their configs differ, a label for each run from them, and their numbers.

What TensorBoard and W&B users expect of a comparison: every run named by what sets it apart (``alpha_min=0.7``,
``alpha_min=0.7, seed=1``), and one table of the differing settings beside each run's final numbers. Pure functions of
config dicts (``config.json``'s ``config`` section) and metric records (``metrics.jsonl``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lab.config import flatten

IGNORED = ("name",)
"""Top-level config keys that never tell runs apart (every run is named; its folder says so)."""
METRICS = ("loss", "train_loss", "test_loss", "train_acc", "test_acc", "probe_top1", "rank_entropy",
           "rank_effective", "digits_fd", "lr")
"""Metric fields a comparison shows first, in this order; any other numeric field follows alphabetically."""
_NOT_METRICS = ("step", "epoch", "time", "kind")


def differing(configs: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The dotted keys whose values are not the same in every config (a key one config lacks differs), with each
    config's value (None where it lacks the key), in the order the keys first appear."""
    flat = [flatten(c) for c in configs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    out = {}
    for key in keys:
        if key in IGNORED:
            continue
        values = [f.get(key) for f in flat]
        if any(v != values[0] for v in values[1:]):
            out[key] = values
    return out


MAX_TEXT = 200
"""A setting's value is shown in at most this many characters (a run folder's config may hold anything)."""


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    text = "unset" if value is None else str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def run_labels(ids: Sequence[str], diff: Mapping[str, Sequence[Any]], most: int = 3) -> list[str]:
    """Each run's label from the settings that differ: ``alpha_min=0.7, seed=1`` (leaf names where they are unique,
    dotted keys where two sections share a leaf; at most ``most`` settings, then ``…``); a run's id where nothing
    differs, or where two runs would read the same."""
    keys = list(diff)
    leaves = [k.rpartition(".")[2] for k in keys]
    names = [leaf if leaves.count(leaf) == 1 else key for key, leaf in zip(keys, leaves, strict=True)]
    labels = []
    for i, run_id in enumerate(ids):
        parts = [f"{name}={_text(diff[key][i])}" for key, name in zip(keys, names, strict=True)]
        labels.append(", ".join(parts[:most]) + (", …" if len(parts) > most else "") if parts else run_id)
    return [label if labels.count(label) == 1 else f"{label} ({run_id})" for label, run_id in zip(labels, ids,
                                                                                               strict=True)]


def metric_fields(records: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
    """The numeric fields of any run's records, :data:`METRICS` first."""
    found = {k for rs in records for r in rs for k, v in r.items()
             if k not in _NOT_METRICS and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return [m for m in METRICS if m in found] + sorted(found - set(METRICS))


def final_numbers(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The last finite value of every numeric field of a run's records, and its last ``step``."""
    out: dict[str, float] = {}
    for r in records:
        for key, value in r.items():
            if key in ("epoch", "time", "kind") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            with contextlib.suppress(OverflowError):  # an integer beyond float range is no number
                if math.isfinite(value):
                    out[key] = float(value)
    return out


def compare_table(ids: Sequence[str], configs: Sequence[Mapping[str, Any]],
                  records: Sequence[Sequence[Mapping[str, Any]]]) -> pd.DataFrame:
    """One row per run: its id and label, the settings that differ, and its final numbers (:func:`final_numbers`
    of the fields :func:`metric_fields` finds), as text (a run folder's values are never markup)."""
    diff = differing(configs)
    labels = run_labels(ids, diff)
    fields = metric_fields(records)
    rows = []
    for i, run_id in enumerate(ids):
        final = final_numbers(records[i])
        rows.append({"run": run_id, "label": labels[i], **{k: _text(v[i]) for k, v in diff.items()},
                     "step": _text(final.get("step")),
                     **{f: f"{final[f]:.4g}" if f in final else "" for f in fields}})
    return pd.DataFrame(rows, columns=["run", "label", *diff, "step", *fields])
