"""Curves of metric records against step that grow in place: new records are streamed into the plots' sources.

One figure, :class:`SeriesFigure`, draws every curve of the lab's pages: a line per ``(record kind, field)`` —
either fixed lines made up front (the loss and accuracy of :class:`LiveCurves`) or a line for each matching field
as it first appears (the Runs page's learning rate, probe and rank figures). Each poll sends only the points that
arrived since the last one (``ColumnDataSource.stream``), never a new figure; a curve keeps at most
:data:`~lab.ui.views.thinned.MAX_POINTS`, evenly thinned; and the ranges are refitted to the data held (on a log scale
for the loss), so a curve can never sit outside its plot, however long the run. Raw Bokeh models change inside
``pn.io.unlocked()`` (see :mod:`lab.ui.views.live_grid`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, Range1d
from bokeh.plotting import figure

from lab.ui.views.ranges import finite_range, set_range
from lab.ui.views.thinned import Thinned
from lab.viz.palette import BLUE, ORANGE

COLORS = (BLUE, ORANGE, "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22", "#d62728")
MAX_LINES = 10  # per figure: a run that logs the rank of every layer shows the first ten
Line = tuple[str, str, str, str]
"""A fixed line: record kind, record field, legend label, colour."""
LOSS_LINES: tuple[Line, ...] = (("step", "loss", "batch loss", "#bbbbbb"), ("eval", "train_loss", "train loss", BLUE),
                                ("eval", "test_loss", "test loss", ORANGE))
ACCURACY_LINES: tuple[Line, ...] = (("eval", "train_acc", "train acc", BLUE), ("eval", "test_acc", "test acc", ORANGE))


def finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (not a boolean, not an integer beyond float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class SeriesFigure:
    """Lines against step of metric-record fields.

    Args:
        title: the figure's title.
        y_label: its y axis label.
        match: ``match(field)`` says whether a field is drawn here, a line appearing with its field's first value
            (at most :data:`MAX_LINES`); unused with ``lines``.
        width, height: plot area in screen pixels.
        lines: fixed lines, made up front in this order; only they are drawn.
        log_y: a log-scale y axis, fitted to the positive values.
        y_range: the y range before any point; with ``fit_y`` False, for good.
        fit_y: refit the y range to the data.
        key: the prefix of its sources' names (``<key>:<field>``, which the browser tests find them by); default
            the title.
    """

    def __init__(self, title: str, y_label: str, match: Callable[[str], bool] = lambda field: False,
                 width: int = 360, height: int = 200, *, lines: Sequence[Line] = (), log_y: bool = False,
                 y_range: tuple[float, float] = (0.0, 1.0), fit_y: bool = True, key: str | None = None) -> None:
        self.match, self.log_y, self.fit_y, self.key = match, log_y, fit_y, key or title
        self.fixed = {(kind, field): (label, color) for kind, field, label, color in lines}
        self.figure = figure(title=title, x_axis_label="step", y_axis_label=y_label, x_range=Range1d(0, 1),
                             y_range=Range1d(*y_range), frame_width=width, frame_height=height,
                             y_axis_type="log" if log_y else "linear", tools="pan,wheel_zoom,box_zoom,reset")
        self.figure.add_tools(HoverTool(tooltips=[("", "$name"), ("step", "@step"), ("value", "@value{0.0000}")]))
        self.legend = Legend(items=[], location="top_left", background_fill_alpha=0.0)
        self.figure.add_layout(self.legend, "right")  # beside the plot, where it hides no new point
        self.sources: dict[tuple[str, str], ColumnDataSource] = {}
        self._curves: dict[tuple[str, str], Thinned] = {}  # each source, its points bounded
        self._x = self._y = (math.inf, -math.inf)
        for key in self.fixed:
            self._source(*key)
        self.pane = pn.pane.Bokeh(self.figure)

    @property
    def has_data(self) -> bool:
        return any(len(s.data["step"]) for s in self.sources.values())

    def _source(self, kind: str, field: str) -> ColumnDataSource | None:
        key = (kind, field)
        if key not in self.sources:
            if self.fixed and key not in self.fixed or len(self.sources) >= MAX_LINES:
                return None
            label, color = self.fixed.get(key) or (
                field if not any(f == field for _, f in self.sources) else f"{field} ({kind})",
                COLORS[len(self.sources) % len(COLORS)])
            source = ColumnDataSource(data={"step": [], "value": []}, name=f"{self.key}:{field}")
            renderers = [self.figure.line("step", "value", source=source, line_width=2, name=label, color=color)]
            if kind != "step":  # evaluations are sparse: a dot shows each, the first one before any line can
                renderers.append(self.figure.scatter("step", "value", source=source, color=color, size=6, name=label))
            self.legend.items = [*self.legend.items, LegendItem(label=label, renderers=renderers)]
            self.sources[key] = source
            self._curves[key] = Thinned(source)
        return self.sources[key]

    def _wanted(self, kind: str, field: str) -> bool:
        return (kind, field) in self.fixed if self.fixed else field != "step" and self.match(field)

    def extend(self, records: Sequence[dict[str, Any]]) -> None:
        """Append the finite numeric values of the fields drawn here (records without a finite step are skipped)."""
        points: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        for r in records:
            step, kind = r.get("step"), str(r.get("kind", ""))
            if not finite(step):
                continue
            for field, value in r.items():
                if self._wanted(kind, field) and finite(value):
                    xs, ys = points.setdefault((kind, field), ([], []))
                    xs.append(step)
                    ys.append(value)
        if not points:
            return
        with pn.io.unlocked():  # a widget callback runs without the document lock
            for key, (xs, ys) in points.items():
                if self._source(*key) is None:
                    continue
                self._curves[key].stream(xs, ys)
                self._x = (min(self._x[0], *xs), max(self._x[1], *xs))
                shown = [y for y in ys if y > 0] if self.log_y else ys
                if shown:
                    self._y = (min(self._y[0], *shown), max(self._y[1], *shown))
            self._fit()

    def _fit(self) -> None:
        if not math.isfinite(self._x[0]):
            return
        set_range(self.figure.x_range, finite_range(self._x, pad=0.02, least=1.0))
        if self.fit_y and math.isfinite(self._y[0]):
            set_range(self.figure.y_range, finite_range(self._y, least=0.05, log=True) if self.log_y
                      else finite_range(self._y))

    def clear(self) -> None:
        """Forget every point (its lines stay, empty, for the next run's fields of the same names)."""
        self._x = self._y = (math.inf, -math.inf)
        with pn.io.unlocked():
            for curve in self._curves.values():
                curve.clear()
            self.figure.x_range.update(start=0, end=1)

    def points(self) -> dict[str, int]:
        """Number of points per curve (``"kind:field"``), for tests and status lines."""
        return {f"{kind}:{field}": len(s.data["step"]) for (kind, field), s in self.sources.items()}


class LiveCurves:
    """Batch loss, train/test loss (log scale) and train/test accuracy against step, from ``metrics.jsonl``
    records (``{"kind": "step", "step", "loss"}`` and ``{"kind": "eval", "step", "train_loss", ...}``): two
    :class:`SeriesFigure` of fixed lines, side by side.

    Args:
        width, height: plot area of each figure in screen pixels.
    """

    def __init__(self, width: int = 360, height: int = 200) -> None:
        self.series = {"loss": SeriesFigure("Loss", "loss", width=width, height=height, lines=LOSS_LINES, log_y=True,
                                            y_range=(0.01, 1.0), key="loss"),
                       "accuracy": SeriesFigure("Accuracy", "accuracy", width=width, height=height,
                                                lines=ACCURACY_LINES, y_range=(0.0, 1.02), fit_y=False,
                                                key="accuracy")}
        self.figures = {name: s.figure for name, s in self.series.items()}
        self.sources = {key: source for s in self.series.values() for key, source in s.sources.items()}
        self.pane = pn.Row(*(s.pane for s in self.series.values()))

    def clear(self) -> None:
        """Forget every point (a new run)."""
        for s in self.series.values():
            s.clear()

    def extend(self, records: Sequence[dict[str, Any]]) -> None:
        """Append the points of ``records`` (any mix of kinds; records without a field are skipped).

        Both figures change in one document patch, so the browser never draws the loss ahead of the accuracy.
        """
        with pn.io.unlocked():  # the figures' own unlocked blocks join this one
            for s in self.series.values():
                s.extend(records)

    def points(self) -> dict[str, int]:
        """Number of points per curve (``"kind:field"``), for tests and status lines."""
        return {k: n for s in self.series.values() for k, n in s.points().items()}
