"""``nodes`` snapshots replayed in the Playground's node grid and decision map, over the run's training points."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import panel as pn

from lab.jobs.kinds import NODES
from lab.ui.views.live_grid import LiveDecision
from lab.ui.views.replays import register
from lab.viz.node_grid import node_grid


class NodesReplay:
    """A ``nodes`` snapshot: every layer and node in the grid (each tile on its own colour range), and the
    decision map.

    The grid is the Bokeh figure the Playground exports (:func:`lab.viz.node_grid.node_grid`), rendered afresh for
    each replayed step: a replay redraws when a slider moves, not at a live view's pace, and a Bokeh figure is a
    model every page's document already knows how to draw when the Runs page lays it out after loading (the live
    canvas, :class:`lab.ui.views.grid_canvas.GridCanvas`, is laid out with its page).
    """

    def __init__(self) -> None:
        self.grid, self.decision = pn.pane.Bokeh(), LiveDecision()

    def panes(self) -> list[pn.viewable.Viewable]:
        return [self.grid, self.decision.pane]

    def show(self, snapshot: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        L, H = snapshot["maps"].shape[:2]
        element = node_grid({**snapshot, "step": np.int64(step)}, layers=(0, L), nodes=(0, H), normalize="tile",
                            points=points)
        self.grid.object = hv.render(element, backend="bokeh")
        self.decision.show(snapshot["decision"], step, *points, _scalar(snapshot.get("limit"), 1.0))


def _scalar(value: object, default: float) -> float:
    """A snapshot's one-number entry (``limit``), or ``default`` when it is missing or not one finite number."""
    array = np.asarray(value if value is not None else default)
    if array.size != 1 or array.dtype.kind not in "biuf" or not np.isfinite(array).all():
        return default
    return float(array.reshape(()))


register(NODES, NodesReplay)
