"""Rich notebook display of the lab's objects: a run folder, a snapshot, node maps.

Each object shows as a small table and its view: a run as its settings, state and curves (and its latest
node maps); a snapshot as its arrays and the view its kind registered (:mod:`lab.ui.views.replays`, the one kind →
view table, which the Runs page replays through too); node maps as the TFMeter grid. The library objects
know nothing of this: :func:`register` (called by :func:`lab.ui.extension`) adds IPython formatters for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import panel as pn

from lab.analysis.node_maps import NodeMaps
from lab.runfolder import layout
from lab.runs.store import Run
from lab.snapshots.kinds import NODES, SnapshotError, check_snapshot
from lab.snapshots.snapshot import Snapshot, load_saved
from lab.ui.text import html_text
from lab.ui.views.replays import REPLAYS
from lab.viz.node_grid import node_grid
from lab.viz.toy2d import training_curves


def _table(rows: list[tuple[str, Any]], title: str) -> pn.pane.HTML:
    """A small table; every name and value is text (a run's folder name, message and metric keys come from
    anywhere: :func:`~lab.ui.text.html_text`)."""
    cells = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{html_text(k)}</th>"
                    f"<td style='text-align:left'>{html_text(v)}</td></tr>" for k, v in rows)
    return pn.pane.HTML(f"<b>{html_text(title)}</b><table>{cells}</table>")


def _arrays(arrays: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for name, value in arrays.items():
        a = np.asarray(value)
        if a.size > 1 and np.issubdtype(a.dtype, np.number):
            rows.append((name, f"{a.dtype} {list(a.shape)}  min {a.min():.4g}  max {a.max():.4g}"))
        else:
            rows.append((name, f"{a.dtype} {a.tolist()}"))
    return rows


def snapshot_view(snapshot: Snapshot) -> pn.viewable.Viewable:
    """A snapshot's arrays (dtype, shape, range) and the view of its kind, where the lab has one."""
    snapshot = snapshot.float32()
    parts = [_table(_arrays(snapshot), f"{snapshot.kind} snapshot at step {snapshot.step}")]
    if snapshot.kind in REPLAYS:  # the one kind → view table (lab.ui.views.replays)
        try:
            check_snapshot(snapshot.kind, snapshot)
        except SnapshotError as err:
            return pn.Column(*parts, _table([("not drawn", str(err))], "view"))
        view = REPLAYS[snapshot.kind]()
        view.show(snapshot, snapshot.step or 0, (np.zeros((0, 2), np.float32), np.zeros(0, np.int64)))
        parts.extend(view.panes())
    return pn.Column(*parts)


def node_maps_view(maps: NodeMaps) -> pn.viewable.Viewable:
    """Node maps as their arrays and the TFMeter grid."""
    arrays = maps.as_arrays()
    return pn.Column(_table(_arrays(arrays), "node maps"), pn.pane.HoloViews(node_grid(arrays)))


def run_view(run: Run) -> pn.viewable.Viewable:
    """A run folder: its state and settings, its loss and accuracy curves and its latest node maps."""
    status, cfg = run.read_status(), run.read_config()
    model, data, train = cfg.get("model", {}), cfg.get("data", {}), cfg.get("train", {})
    metrics = status.get("metrics") or {}
    rows = [("state", f"{status.get('state', 'unknown')}: {status.get('message', '')}"),
            ("step", f"{status.get('step', 0)} / {status.get('total_steps') or '?'}"),
            ("model", ", ".join(f"{k}={model[k]}" for k in ("name", "depth", "width", "shortcut", "alpha_min")
                                if k in model)),
            ("data", ", ".join(f"{k}={data[k]}" for k in ("name", "n", "noise") if k in data)),
            ("training", ", ".join(f"{k}={train[k]}" for k in ("optimizer", "lr", "batch_size", "droppath",
                                                              "drop_path_rate") if k in train)),
            *[(k, f"{v:.4g}") for k, v in metrics.items() if isinstance(v, float)],
            ("checkpoints", ", ".join(p.stem for p in sorted((run.path / layout.CHECKPOINTS)
                                                             .glob(layout.checkpoint_name("*")))) or "none"),
            ("folder", str(run.path))]
    parts = [_table(rows, f"run {run.id}")]
    records = run.metric_records()
    if records:
        parts.append(pn.pane.HoloViews(training_curves(records)))
    latest = load_saved(run, NODES)
    if latest is not None:
        parts.append(pn.pane.HoloViews(node_grid(latest[1])))
    return pn.Column(*parts)


VIEWS: dict[type, Callable[[Any], pn.viewable.Viewable]] = {
    Run: run_view, Snapshot: snapshot_view, NodeMaps: node_maps_view}


def register(shell: Any) -> None:
    """Display :data:`VIEWS`' types with their views in an IPython ``shell`` (a notebook kernel)."""
    formatter = shell.display_formatter.mimebundle_formatter
    for cls, view in VIEWS.items():
        formatter.for_type(cls, lambda obj, include=None, exclude=None, _view=view:
                           _view(obj)._repr_mimebundle_(include, exclude))
