"""The shortcut scale α of every block as bars, redrawn in place when a setting changes.

A control's first visible answer on the Playground: moving ``alpha_min`` or the depth changes these bars, so they
are a raw Bokeh figure whose source is replaced (about a millisecond), not a HoloViews element re-rendered per
change (a hundred or more milliseconds, far more while jobs train in the same process).
"""

from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, Range1d
from bokeh.plotting import figure

from lab.viz.palette import BLUE


class LiveAlphas:
    """Bars of ``alphas [L]`` at layer index l = 1..L (block l−1's output), as :func:`lab.viz.node_grid.alpha_bars`
    draws them for exports."""

    def __init__(self, width: int = 360, height: int = 200) -> None:
        self.source = ColumnDataSource(data={"layer": np.zeros(0, np.float32), "alpha": np.zeros(0, np.float32)})
        self.figure = figure(title="α per block", x_axis_label="layer", y_axis_label="α", width=width,
                             height=height, x_range=Range1d(0.5, 1.5), y_range=Range1d(0, 1.05),
                             tools="hover", tooltips=[("layer", "@layer"), ("α", "@alpha{0.000}")])
        self.figure.vbar(x="layer", top="alpha", width=0.9, source=self.source, color=BLUE, line_color="white")
        self.pane = pn.pane.Bokeh(self.figure)

    def show(self, alphas: np.ndarray) -> None:
        a = np.asarray(alphas, np.float32).ravel()
        with pn.io.unlocked():  # a widget callback runs without the document lock (see lab.ui.views.live_grid)
            self.source.data = {"layer": np.arange(1, len(a) + 1, dtype=np.float32), "alpha": a}
            self.figure.x_range.update(start=0.5, end=len(a) + 0.5)
            self.figure.y_range.update(start=0, end=1.05 * max(1.0, float(a.max()) if len(a) else 1.0))

    @property
    def alphas(self) -> np.ndarray:
        """The α values on screen."""
        return np.asarray(self.source.data["alpha"])
