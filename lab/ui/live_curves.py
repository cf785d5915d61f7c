"""Loss and accuracy curves that grow in place: new metric records are streamed into the plots' sources.

Each poll sends only the points that arrived since the last one (``ColumnDataSource.stream``), never a new
figure, and the axes are :class:`~bokeh.models.DataRange1d`, which the browser fits to the data it holds: a
curve can never sit outside its plot's ranges, however long the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import panel as pn
from bokeh.models import ColumnDataSource, DataRange1d, Range1d
from bokeh.plotting import figure

from lab.viz.palette import BLUE, ORANGE

# (figure, record kind, record field, legend label, colour)
_LINES = (("loss", "step", "loss", "batch loss", "#bbbbbb"),
          ("loss", "eval", "train_loss", "train loss", BLUE),
          ("loss", "eval", "test_loss", "test loss", ORANGE),
          ("accuracy", "eval", "train_acc", "train acc", BLUE),
          ("accuracy", "eval", "test_acc", "test acc", ORANGE))


class LiveCurves:
    """Batch loss, train/test loss (log scale) and train/test accuracy against step, from ``metrics.jsonl``
    records (``{"kind": "step", "step", "loss"}`` and ``{"kind": "eval", "step", "train_loss", ...}``).

    Args:
        width, height: plot area of each figure in screen pixels.
    """

    def __init__(self, width: int = 360, height: int = 200) -> None:
        self.figures = {
            "loss": figure(title="Loss", y_axis_type="log", x_axis_label="step", y_axis_label="loss",
                           x_range=DataRange1d(), y_range=DataRange1d(), frame_width=width,
                           frame_height=height, tools="pan,wheel_zoom,box_zoom,reset,hover"),
            "accuracy": figure(title="Accuracy", x_axis_label="step", y_axis_label="accuracy",
                               x_range=DataRange1d(), y_range=Range1d(0.0, 1.02), frame_width=width,
                               frame_height=height, tools="pan,wheel_zoom,box_zoom,reset,hover")}
        self.sources: dict[tuple[str, str], ColumnDataSource] = {}
        for fig, kind, field, label, color in _LINES:
            source = ColumnDataSource(data={"step": [], "value": []}, name=f"{fig}:{field}")
            self.figures[fig].line("step", "value", source=source, color=color, line_width=2, legend_label=label)
            self.sources[(kind, field)] = source
        for fig, where in (("loss", "top_right"), ("accuracy", "bottom_right")):
            self.figures[fig].legend.location = where
            self.figures[fig].legend.background_fill_alpha = 0.6
        self.pane = pn.Row(*(pn.pane.Bokeh(f) for f in self.figures.values()))

    def clear(self) -> None:
        """Forget every point (a new run)."""
        with pn.io.unlocked():  # a widget callback runs without the document lock (see lab.ui.live_grid)
            for source in self.sources.values():
                source.data = {"step": [], "value": []}

    def extend(self, records: Sequence[dict[str, Any]]) -> None:
        """Append the points of ``records`` (any mix of kinds; records without a field are skipped)."""
        with pn.io.unlocked():
            for (kind, field), source in self.sources.items():
                pts = [(r["step"], r[field]) for r in records if r.get("kind") == kind and field in r]
                if pts:
                    steps, values = zip(*pts, strict=True)
                    source.stream({"step": list(steps), "value": list(values)})

    def points(self) -> dict[str, int]:
        """Number of points per curve (``"kind:field"``), for tests and status lines."""
        return {f"{kind}:{field}": len(s.data["step"]) for (kind, field), s in self.sources.items()}
