"""Several runs' curves overlaid, each run labelled by what differs in its config, and a table of those settings
beside each run's final numbers (:mod:`lab.reports.compare`).

One figure per metric field that any of the runs records (loss, accuracies, probe, rank, digits-FD, learning rate
first), one line per run in the same colour in every figure, a dot per evaluation. Figures are made once per field
and kept (a figure replaced in a served page lingers in its document); those of fields no compared run records are
hidden. Every value read from a run folder is shown as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure

from lab.reports.compare import compare_table
from lab.ui.text import code, html_text, markdown_pane
from lab.ui.views.live_curves import COLORS
from lab.ui.views.live_rank import side_legend
from lab.ui.views.plain_text import plain, plain_title
from lab.ui.views.ranges import finite_range, set_range
from lab.ui.views.run_views import clean_record

MAX_FIGURES = 8
MAX_COLUMNS = 24
"""At most this many differing settings, and this many metrics, become columns of the table."""
PER_ROW = 2


class _FieldFigure:
    """One metric over steps, one line (and dots at evaluations) per run."""

    def __init__(self, field: str, width: int, height: int) -> None:
        # the field is a metric name from a run folder: plain text, never typeset as TeX (lab.ui.views.plain_text)
        self.figure = figure(title=plain_title(field), x_axis_label="step", y_axis_label=plain(field),
                             x_range=Range1d(0, 1),
                             y_range=Range1d(0, 1), frame_width=width, frame_height=height,
                             tools="pan,wheel_zoom,box_zoom,reset,save")
        self.lines = ColumnDataSource({"xs": [], "ys": [], "color": [], "label": []}, name=f"compare:{field}")
        self.dots = ColumnDataSource({"x": [], "y": [], "color": [], "label": []}, name=f"compare-dots:{field}")
        lines = self.figure.multi_line("xs", "ys", color="color", line_width=2, source=self.lines)
        dots = self.figure.scatter("x", "y", color="color", size=6, source=self.dots)
        self.figure.add_tools(HoverTool(renderers=[dots], tooltips=[("run", "@label"), ("step", "@x"),
                                                                    ("value", "@y{0.0000}")]))
        side_legend(self.figure, lines, "label", "run")
        self.pane = pn.pane.Bokeh(self.figure)

    def show(self, field: str, labels: Sequence[str], records: Sequence[Sequence[dict[str, Any]]]) -> bool:
        """Draw ``field`` of every run (records cleaned by :func:`~lab.ui.views.run_views.clean_record`); returns
        whether any run recorded it."""
        xs, ys, colors, names, dots = [], [], [], [], {"x": [], "y": [], "color": [], "label": []}
        for k, (label, rs) in enumerate(zip(labels, records, strict=True)):
            points = [(r["step"], r[field], r["kind"] != "step") for r in rs if field in r]
            if not points:
                continue
            color = COLORS[k % len(COLORS)]
            xs.append([p[0] for p in points])
            ys.append([p[1] for p in points])
            colors.append(color)
            names.append(label)
            for x, y, sparse in points:
                if sparse or len(points) == 1:
                    dots["x"].append(x)
                    dots["y"].append(y)
                    dots["color"].append(color)
                    dots["label"].append(label)
        with pn.io.unlocked():
            self.lines.data = {"xs": xs, "ys": ys, "color": colors, "label": names}
            self.dots.data = dots
            set_range(self.figure.x_range, finite_range(*xs, pad=0.02, least=1.0))
            set_range(self.figure.y_range, finite_range(*ys))
        return bool(xs)


class CompareViews:
    """The comparison of the runs given to :meth:`show`.

    Args:
        width, height: each figure's frame in screen pixels.
    """

    def __init__(self, width: int = 360, height: int = 200) -> None:
        self.width, self.height = width, height
        self.figures: dict[str, _FieldFigure] = {}
        self.summary = markdown_pane("", margin=(0, 10), sizing_mode="stretch_width")
        self.table = pn.widgets.Tabulator(pd.DataFrame(), disabled=True, show_index=False, layout="fit_data_table",
                                          sizing_mode="stretch_width", max_height=300)
        self.plots = pn.Column(sizing_mode="stretch_width")
        self.layout = pn.Column(self.summary, self.table, self.plots, sizing_mode="stretch_width", visible=False)

    def show(self, ids: Sequence[str], configs: Sequence[Mapping[str, Any]],
             records: Sequence[Sequence[Mapping[str, Any]]]) -> None:
        """Compare the runs named ``ids``: their configs (``config.json``'s section) and metric records."""
        if len(ids) < 2:
            self.layout.visible = False
            return
        records = [[c for c in map(clean_record, rs) if c is not None] for rs in records]
        frame = compare_table(ids, configs, records)  # run, label, the differing settings, step, the metric fields
        labels, step = list(frame["label"]), frame.columns.get_loc("step")
        diff, fields = list(frame.columns[2:step]), list(frame.columns[step + 1:])
        frame = frame[["run", "label", *diff[:MAX_COLUMNS], "step", *fields[:MAX_COLUMNS]]]
        shown = []
        for field in fields[:MAX_FIGURES]:
            if field not in self.figures:
                self.figures[field] = _FieldFigure(field, self.width, self.height)
            if self.figures[field].show(field, labels, records):
                shown.append(self.figures[field].pane)
        # the column titles are a run folder's config and metric keys, and Tabulator renders a title as HTML: each
        # column gets a field name of its own and its title as escaped text; every cell is text too
        names = [f"c{i}" for i in range(len(frame.columns))]
        titles = {name: html_text(column) for name, column in zip(names, frame.columns, strict=True)}
        frame = frame.set_axis(names, axis=1)
        if not frame.equals(self.table.value) or titles != self.table.titles:
            self.table.param.update(titles=titles, formatters=dict.fromkeys(names, {"type": "textarea"}), value=frame)
        if [p for row in self.plots for p in row] != shown:
            self.plots[:] = [pn.Row(*shown[i:i + PER_ROW]) for i in range(0, len(shown), PER_ROW)]
        unread = [code(i) for i, c in zip(ids, configs, strict=True) if not c]  # not "the same" as another's
        same = "nothing readable" if unread else "nothing: the same configs"
        what = ", ".join(code(k) for k in diff[:MAX_COLUMNS]) if diff else same
        more = f" and {len(diff) - MAX_COLUMNS} more settings" if len(diff) > MAX_COLUMNS else ""
        unread_words = (f" No config could be read from {', '.join(unread)} (the Runs table's problems say why)."
                        if unread else "")
        self.summary.object = f"#### Comparing {len(ids)} runs\nTheir configs differ in {what}{more}.{unread_words}"
        self.layout.visible = True

    def column(self, title: str) -> list[str]:
        """The table's column titled ``title`` (the setting or metric it shows), as shown."""
        names = [name for name, shown in self.table.titles.items() if shown == html_text(title)]
        return list(self.table.value[names[0]]) if names else []
