"""The node grid as a live Bokeh figure: rendered once per layout, then updated by replacing source data.

Re-rendering the HoloViews overlay for every snapshot costs hundreds of milliseconds (bench/render_grid.py); a snapshot
of the same layout only changes the mosaic pixels (tiles and weight lines) and the hover ranges, so those are
written into the existing figure's data sources and only the changed arrays travel to the browser.
Bokeh models are touched only here, on the session's thread, inside ``pn.io.unlocked()``: a widget's callback runs
without the document lock, and a change to a raw Bokeh model there must be dispatched by Panel (in a notebook, or
under the lock of a periodic callback, the context manager does nothing).
"""

from __future__ import annotations

from typing import Any

import holoviews as hv
import numpy as np
import panel as pn
from bokeh.models import Image, Quad

from lab.viz.node_grid import FIT_PX, hover_boxes, mosaic, node_grid
from lab.viz.toy2d import decision_map, points


class LiveGrid:
    """Hold one rendered node-grid figure and keep it current.

    Args:
        max_points: training points drawn on the decision tile.
    """

    def __init__(self, max_points: int = 300) -> None:
        self.max_points = max_points
        self.pane = pn.pane.Bokeh()
        self.figure = None
        self._layout_key: tuple | None = None
        self.full_renders = 0  # how often the whole figure was rebuilt (tests and benchmarks read it)

    def _sources(self) -> dict[str, Any]:
        found = {}
        for renderer in self.figure.renderers:
            for kind, glyph in (("image", Image), ("hover", Quad)):
                if isinstance(renderer.glyph, glyph):
                    found[kind] = renderer.data_source
        return found

    def show(self, snapshot: dict[str, np.ndarray], *, layers: tuple[int, int], nodes: tuple[int, int],
             normalize: str, points: tuple[np.ndarray, np.ndarray], fit_width: int = FIT_PX[0]) -> None:
        """Draw ``snapshot`` (a nodes snapshot) with the given view settings, about ``fit_width`` pixels wide."""
        key = (snapshot["maps"].shape, snapshot["weights"].shape, layers, nodes, normalize, fit_width)
        if key != self._layout_key or self.figure is None:
            element = node_grid(snapshot, layers=layers, nodes=nodes, normalize=normalize, points=points,
                                max_points=self.max_points, fit_width=fit_width)
            self.figure = hv.render(element, backend="bokeh")
            self.pane.object = self.figure
            self._layout_key = key
            self.full_renders += 1
            return
        m = mosaic(snapshot, layers=layers, nodes=nodes, normalize=normalize, fit_width=fit_width)
        box = hover_boxes(m, float(snapshot.get("limit", 1.0)), snapshot.get("decision"))
        sources = self._sources()
        with pn.io.unlocked():
            sources["image"].data.update(image=[m.index[::-1]])
            sources["hover"].data.update(min=box["min"], max=box["max"])  # tiles stay put; their ranges change
            if "step" in snapshot:
                self.figure.title.text = f"step {int(snapshot['step'])}"


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
