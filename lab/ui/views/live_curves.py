"""Loss and accuracy curves that grow in place: new metric records are streamed into the plots' sources.

Each poll sends only the points that arrived since the last one (``ColumnDataSource.stream``), never a new
figure, and the ranges are refitted to the data held (on a log scale for the loss), so a curve can never sit
outside its plot, however long the run. Raw Bokeh models change inside ``pn.io.unlocked()`` (see
:mod:`lab.ui.views.live_grid`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import panel as pn
from bokeh.models import ColumnDataSource, Legend, Range1d
from bokeh.plotting import figure

from lab.ui.views.ranges import finite_range, set_range
from lab.ui.views.thinned import Thinned
from lab.viz.palette import BLUE, ORANGE

# (figure, record kind, record field, legend label, colour)
_LINES = (("loss", "step", "loss", "batch loss", "#bbbbbb"),
          ("loss", "eval", "train_loss", "train loss", BLUE),
          ("loss", "eval", "test_loss", "test loss", ORANGE),
          ("accuracy", "eval", "train_acc", "train acc", BLUE),
          ("accuracy", "eval", "test_acc", "test acc", ORANGE))


def _empty() -> dict[str, list]:
    return {"step": [], "value": []}  # new lists each time: streaming extends them in place


class LiveCurves:
    """Batch loss, train/test loss (log scale) and train/test accuracy against step, from ``metrics.jsonl``
    records (``{"kind": "step", "step", "loss"}`` and ``{"kind": "eval", "step", "train_loss", ...}``).

    Args:
        width, height: plot area of each figure in screen pixels.
    """

    def __init__(self, width: int = 360, height: int = 200) -> None:
        tools = "pan,wheel_zoom,box_zoom,reset,hover"
        self.figures = {
            "loss": figure(title="Loss", y_axis_type="log", x_axis_label="step", y_axis_label="loss",
                           x_range=Range1d(0, 1), y_range=Range1d(0.01, 1), frame_width=width,
                           frame_height=height, tools=tools),
            "accuracy": figure(title="Accuracy", x_axis_label="step", y_axis_label="accuracy",
                               x_range=Range1d(0, 1), y_range=Range1d(0.0, 1.02), frame_width=width,
                               frame_height=height, tools=tools)}
        self.sources: dict[tuple[str, str], ColumnDataSource] = {}
        self._curves: dict[tuple[str, str], Thinned] = {}  # each source, its points bounded
        self._extent: dict[str, tuple[float, float]] = {}  # running (min, max) of each figure's steps, of losses
        items: dict[str, list[tuple[str, list]]] = {name: [] for name in self.figures}
        for fig, kind, field, label, color in _LINES:
            source = ColumnDataSource(data=_empty(), name=f"{fig}:{field}")
            line = self.figures[fig].line("step", "value", source=source, color=color, line_width=2)
            renderers = [line]
            if kind == "eval":  # evaluations are sparse: a dot shows each, the first one before any line can
                renderers.append(self.figures[fig].scatter("step", "value", source=source, color=color, size=6))
            items[fig].append((label, renderers))
            self.sources[(kind, field)] = source
            self._curves[(kind, field)] = Thinned(source)
        for name, fig in self.figures.items():  # beside the plot, where it hides no new point
            fig.add_layout(Legend(items=items[name], location="top_left", background_fill_alpha=0.0), "right")
        self.pane = pn.Row(*(pn.pane.Bokeh(f) for f in self.figures.values()))

    def clear(self) -> None:
        """Forget every point (a new run)."""
        self._extent.clear()
        with pn.io.unlocked():  # a widget callback runs without the document lock
            for curve in self._curves.values():
                curve.clear()
            for fig in self.figures.values():
                fig.x_range.update(start=0, end=1)

    def extend(self, records: Sequence[dict[str, Any]]) -> None:
        """Append the points of ``records`` (any mix of kinds; records without a field are skipped); a curve keeps
        at most :data:`~lab.ui.views.thinned.MAX_POINTS`, evenly thinned."""
        with pn.io.unlocked():
            for (kind, field), source in self.sources.items():
                pts = [(r["step"], r[field]) for r in records if r.get("kind") == kind and field in r]
                if pts:
                    steps, values = zip(*pts, strict=True)
                    self._curves[(kind, field)].stream(steps, values)
                    name = source.name.split(":")[0]
                    self._grow(f"{name} steps", steps)
                    if name == "loss":
                        self._grow("loss values", [v for v in values if v > 0 and math.isfinite(v)])
            self._fit()

    def _grow(self, key: str, values: Sequence[float]) -> None:
        """Widen the running extent ``key`` by ``values`` (each point is looked at once, not at every poll)."""
        if values:
            lo, hi = self._extent.get(key, (math.inf, -math.inf))
            self._extent[key] = (min(lo, *values), max(hi, *values))

    def _fit(self) -> None:
        """Fit each figure's step range to its data, and the loss range (log scale) to the positive losses."""
        for name, fig in self.figures.items():
            if f"{name} steps" in self._extent:
                set_range(fig.x_range, finite_range(self._extent[f"{name} steps"], pad=0.02, least=1.0))
        if "loss values" in self._extent:
            set_range(self.figures["loss"].y_range, finite_range(self._extent["loss values"], least=0.05, log=True))

    def points(self) -> dict[str, int]:
        """Number of points per curve (``"kind:field"``), for tests and status lines."""
        return {f"{kind}:{field}": len(s.data["step"]) for (kind, field), s in self.sources.items()}
