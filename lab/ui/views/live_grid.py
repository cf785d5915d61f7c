"""The node grid and the decision map, live: drawn once per layout, then updated in place at every snapshot.

The grid goes to the browser as its mosaic's palette indices, drawn on a canvas (:class:`GridCanvas`): a snapshot of
the same layout changes the pixels, the hover ranges and the title, and only those travel; the decision map the
same way, on a canvas of its own. Bokeh models are touched only here, on the session's thread. A new
layout is set as any other change of the page; a frame of the same layout inside ``pn.io.unlocked()``: a
widget's callback runs without the document lock, and a frame must be dispatched at once, before the frame clock's
count that follows it (in a notebook, or under the lock of a periodic callback, the context manager does nothing).
"""

from __future__ import annotations

import numpy as np
import panel as pn

from lab.ui.views.grid_canvas import GridCanvas
from lab.viz.node_grid import FIT_PX, Mosaic, decision_pixels, hover_boxes, mosaic, point_marks


def _update(pane: GridCanvas, change: dict) -> None:
    """Send a frame: with a new layout as any other change of the page, else inside ``pn.io.unlocked()``."""
    if "layout" in change:
        pane.param.update(change)
        return
    with pn.io.unlocked():
        pane.param.update(change)


class LiveGrid:
    """Hold one node-grid canvas and keep it current.

    Args:
        max_points: training points drawn on the decision tile.
    """

    def __init__(self, max_points: int = 300) -> None:
        self.max_points = max_points
        self.pane = GridCanvas()
        self._layout_key: tuple | None = None
        self.layouts = 0  # how often the layout (size, labels, hover boxes, points) was sent (tests read it)

    def show(self, snapshot: dict[str, np.ndarray], *, layers: tuple[int, int], nodes: tuple[int, int],
             normalize: str, points: tuple[np.ndarray, np.ndarray], fit_width: int = FIT_PX[0]) -> None:
        """Draw ``snapshot`` (a nodes snapshot) with the given view settings, about ``fit_width`` pixels wide."""
        m = mosaic(snapshot, layers=layers, nodes=nodes, normalize=normalize, fit_width=fit_width)
        limit = float(snapshot.get("limit", 1.0))
        decision = snapshot.get("decision")
        box = hover_boxes(m, limit, None if decision is None else np.asarray(decision))
        change = {"pixels": m.index, "ranges": np.stack([box["min"], box["max"]], axis=1),
                  "title": f"step {int(snapshot['step'])}" if "step" in snapshot else ""}
        key = (m.index.shape, m.tile, tuple(m.layers), tuple(m.nodes), m.decision, id(points[0]), limit)
        if key != self._layout_key:
            change["layout"] = self._layout(m, box, points, limit)
            self._layout_key = key
            self.layouts += 1
        _update(self.pane, change)

    def _layout(self, m: Mosaic, box: dict[str, np.ndarray], points: tuple[np.ndarray, np.ndarray],
                limit: float) -> dict:
        """What changes only with the view: tick labels, hover boxes (y down from the top) and the points."""
        labels = (["in"] if m.has_input else []) + [str(v) for v in m.layers]
        columns = [[int(m.column_x(c)) + m.tile / 2, label] for c, label in enumerate(labels)]
        if m.decision is not None:
            columns.append([m.decision[0] + m.decision[2] / 2, "out"])
        rows = [[m.height - float(m.row_y(r)) - m.tile / 2, str(n)] for r, n in enumerate(m.nodes)]
        boxes = [[int(x0), m.height - int(y1), int(x1), m.height - int(y0), str(layer), str(node)]
                 for x0, y0, x1, y1, layer, node in zip(box["x0"], box["y0"], box["x1"], box["y1"], box["layer"],
                                                        box["node"], strict=True)]
        marks = point_marks(m.decision, points, limit, self.max_points) if m.decision is not None else None
        dots = [] if marks is None else [[float(x), m.height - float(y), int(c)]
                                         for x, y, c in zip(marks["x"], marks["y"], marks["class"], strict=True)]
        return {"columns": columns, "rows": rows, "boxes": boxes, "points": dots, "xlabel": "layer (0 = stem)",
                "ylabel": "node"}


class LiveDecision:
    """The decision map under the training points, on a canvas of its own (:class:`GridCanvas`): its pixels, value
    range and title change at every snapshot, the ticks and the points with the data set.

    A Bokeh figure of the map, repainted at every snapshot, cost the browser about 12 ms of its main thread per
    frame of the Playground; here a frame is one colour lookup over ``size ** 2`` pixels. Hover names the map and its
    range as the grid's decision tile does; the exports and a run's replay draw the figure
    (:func:`lab.viz.toy2d.decision_overlay`).

    Args:
        size: side of the map in screen pixels.
        max_points: training points drawn over it (evenly subsampled).
    """

    def __init__(self, size: int = 300, max_points: int = 2000) -> None:
        self.size, self.max_points = size, max_points
        self.pane = GridCanvas()
        self._layout_key: tuple | None = None

    def show(self, decision: np.ndarray, step: int, x: np.ndarray, y: np.ndarray, limit: float = 1.0) -> None:
        """Draw ``decision [R, R]`` (grid order, :func:`lab.data.evaluation_grid.grid`) at ``step`` over points
        ``x [n, 2]``, ``y [n]``, the square spanning ``±limit``."""
        p = np.asarray(decision, np.float32)
        change = {"pixels": decision_pixels(p, self.size), "ranges": np.array([[p.min(), p.max()]], np.float32),
                  "title": f"Decision boundary at step {step}"}
        key = (id(x), limit)
        if key != self._layout_key:
            change["layout"] = self._layout(x, y, limit)
            self._layout_key = key
        _update(self.pane, change)

    def _layout(self, x: np.ndarray, y: np.ndarray, limit: float) -> dict:
        """Ticks along both axes (at ±limit/2 and 0: a label at the map's edge would be cut in half), one hover box
        (the whole map) and the points, y down from the top."""
        n = self.size
        ticks = np.array([-limit / 2, 0.0, limit / 2])
        at = (ticks + limit) / (2 * limit) * n
        marks = point_marks((0, 0, n), (x, y), limit, self.max_points)
        return {"columns": [[float(a), f"{t:g}"] for a, t in zip(at, ticks, strict=True)],
                "rows": [[float(n - a), f"{t:g}"] for a, t in zip(at, ticks, strict=True)],
                "boxes": [[0, 0, n, n, "output", "p(class 1)"]],
                "points": [[float(a), float(n - b), int(c)]
                           for a, b, c in zip(marks["x"], marks["y"], marks["class"], strict=True)],
                "xlabel": "x", "ylabel": "y"}
