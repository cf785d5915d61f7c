"""The node grid and the decision map, live: drawn once per layout, then updated in place at every snapshot.

The grid goes to the browser as its mosaic's palette indices, drawn on a canvas (:class:`GridCanvas`): a snapshot of
the same layout changes the pixels, the hover ranges and the title, and only those travel. The decision map is a
Bokeh figure whose image source is replaced. Bokeh models are touched only here, on the session's thread. A new
layout (or figure) is set as any other change of the page; a frame of the same layout inside ``pn.io.unlocked()``: a
widget's callback runs without the document lock, and a frame must be dispatched at once, before the frame clock's
count that follows it (in a notebook, or under the lock of a periodic callback, the context manager does nothing).
"""

from __future__ import annotations

import holoviews as hv
import numpy as np
import panel as pn
from bokeh.models import Image

from lab.ui.views.grid_canvas import GridCanvas
from lab.viz.node_grid import FIT_PX, Mosaic, hover_boxes, mosaic, point_marks
from lab.viz.toy2d import decision_map, points


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
            self.pane.param.update(change)
            return
        with pn.io.unlocked():
            self.pane.param.update(change)

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
        marks = point_marks(m, points, limit, self.max_points) if m.decision is not None else None
        dots = [] if marks is None else [[float(x), m.height - float(y), int(c)]
                                         for x, y, c in zip(marks["x"], marks["y"], marks["class"], strict=True)]
        return {"columns": columns, "rows": rows, "boxes": boxes, "points": dots, "xlabel": "layer (0 = stem)",
                "ylabel": "node"}


class LiveDecision:
    """The decision map under the training points: rendered once per dataset, then only its pixels and title
    change (a HoloViews re-render of the overlay cost more than a whole grid frame)."""

    def __init__(self, size: int = 300, max_points: int = 2000) -> None:
        self.size, self.max_points = size, max_points
        self.pane = pn.pane.Bokeh()
        self.figure = None
        self._data_key: object = None

    def element(self, decision: np.ndarray, step: int, x: np.ndarray, y: np.ndarray, limit: float = 1.0
                ) -> hv.Overlay:
        """The HoloViews overlay this view draws (also for exports)."""
        keep = np.linspace(0, len(x) - 1, min(len(x), self.max_points)).astype(int) if len(x) else []
        return (decision_map(decision, limit, title=f"Decision boundary at step {step}")
                * points(x[keep], y[keep])).opts(frame_width=self.size, frame_height=self.size,
                                                  xlim=(-limit, limit), ylim=(-limit, limit))

    def show(self, decision: np.ndarray, step: int, x: np.ndarray, y: np.ndarray, limit: float = 1.0) -> None:
        """Draw ``decision [R, R]`` (grid order, :func:`lab.data.grid.grid`) at ``step`` over points ``x, y``."""
        title = f"Decision boundary at step {step}"
        key = (id(x), decision.shape, limit)
        if self.figure is None or key != self._data_key:
            self.figure = hv.render(self.element(decision, step, x, y, limit), backend="bokeh")
            self.pane.object = self.figure
            self._data_key = key
            return
        image = next(r.data_source for r in self.figure.renderers if isinstance(r.glyph, Image))
        with pn.io.unlocked():
            image.data.update(image=[np.asarray(decision, np.float32)])  # Bokeh's rows run bottom-up, as the grid's
            self.figure.title.text = title
