"""``nodes`` snapshots replayed in the Playground's node grid and decision map, over the run's training points."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import panel as pn

from lab.snapshots.kinds import NODES
from lab.ui.views.replays import register
from lab.viz.node_grid import node_grid
from lab.viz.toy2d import decision_overlay

MAX_LAYERS, MAX_NODES = 65, 64
"""The most layers and nodes per layer a replay draws, evenly spaced (both ends kept): the Playground's largest model
whole, and a bounded cost for any other (a grid's weight lines grow with the square of its nodes)."""


class NodesReplay:
    """A ``nodes`` snapshot: every layer and node in the grid (each tile on its own colour range), and the
    decision map.

    Both are the Bokeh figures the Playground exports (:func:`lab.viz.node_grid.node_grid`,
    :func:`lab.viz.toy2d.decision_overlay`), rendered afresh for each replayed step: a replay redraws when a slider
    moves, not at a live view's pace, and a Bokeh figure is a model every page's document already knows how to draw
    when the Runs page lays it out after loading (the live canvases, :class:`lab.ui.views.grid_canvas.GridCanvas`,
    are laid out with their page).
    """

    def __init__(self) -> None:
        self.grid, self.decision = pn.pane.Bokeh(), pn.pane.Bokeh()

    def panes(self) -> list[pn.viewable.Viewable]:
        return [self.grid, self.decision]

    def show(self, snapshot: dict[str, np.ndarray], step: int, points: tuple[np.ndarray, np.ndarray]) -> None:
        L, H = snapshot["maps"].shape[:2]
        element = node_grid({**snapshot, "step": np.int64(step)}, layers=(0, L), nodes=(0, H), normalize="tile",
                            points=points, max_layers=MAX_LAYERS, max_nodes=MAX_NODES)
        self.grid.object = hv.render(element, backend="bokeh")
        decision = decision_overlay(snapshot["decision"], step, *points, _scalar(snapshot.get("limit"), 1.0))
        self.decision.object = hv.render(decision, backend="bokeh")


def _scalar(value: object, default: float) -> float:
    """A snapshot's one-number entry (``limit``), or ``default`` when it is missing or not one finite number."""
    array = np.asarray(value if value is not None else default)
    if array.size != 1 or array.dtype.kind not in "biuf" or not np.isfinite(array).all():
        return default
    return float(array.reshape(()))


register(NODES, NodesReplay)
