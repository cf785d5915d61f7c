"""One network's layers side by side: feature rank, a probe's accuracy and re-transformation, layer by layer.

What the Rank page draws for a checkpoint (:class:`~lab.ui.views.checkpoint_source.CheckpointSource`): from
:func:`~lab.reports.layer_rank.layer_rank_report` the rank of every layer's features (the paper's Eq. 6 entropy and
Roy & Vetterli's effective rank) and the held-out accuracy of a ridge probe on them, and from
:func:`~lab.reports.retransformation.retransformation_report` each layer's distance to its stage's input and its
linear CKA to the input (ResidualDroppath's Figure 3 measure). Raw Bokeh figures whose sources are replaced and
whose ranges are set from the data drawn, as the lab's other views.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure

from lab.ui.text import markdown_pane, md
from lab.ui.views.ranges import finite_range, set_range
from lab.viz.palette import BLUE, ORANGE

__all__ = ["LayerProfileViews"]

LINES = {"rank": (("eq6_entropy", "Eq. 6 entropy (nats)", BLUE), ("effective_rank", "effective rank", ORANGE)),
         "probe": (("probe_acc", "ridge probe", BLUE),),
         "moves": (("to_input", "distance to the stage's input", BLUE), ("cka_to_input", "linear CKA to h₀", ORANGE))}
"""Per figure: (key, legend, colour) of each line."""
TITLES = {"rank": "Rank by layer", "probe": "Probe accuracy by layer", "moves": "Re-transformation by layer"}


def _values(values: list[Any] | None) -> np.ndarray:
    """A report's list (None for NaN) as floats."""
    return np.array([np.nan if v is None else v for v in (values or [])], np.float64)


class LayerProfileViews:
    """Three figures of one network's layers; :meth:`show` draws a rank and a re-transformation report.

    Args:
        size: plot side in screen pixels.
    """

    def __init__(self, size: int = 300) -> None:
        self.shown: dict[str, Any] | None = None
        self.sources: dict[str, ColumnDataSource] = {}
        self.figures: dict[str, figure] = {}
        for name, lines in LINES.items():
            fig = figure(title=TITLES[name], frame_width=size, frame_height=size - 60, x_range=Range1d(0, 1),
                         y_range=Range1d(0, 1), tools="pan,wheel_zoom,box_zoom,reset,save",
                         x_axis_label="layer (0 = input to the first step)")
            for key, label, color in lines:
                source = ColumnDataSource(data={"layer": [], "value": [], "step": []}, name=f"{name}_{key}")
                r = fig.line("layer", "value", source=source, color=color, line_width=2, legend_label=label)
                fig.scatter("layer", "value", source=source, color=color, size=4)
                fig.add_tools(HoverTool(renderers=[r], tooltips=[("layer", "@layer"), ("after", "@step"),
                                                                 (label, "@value{0.000}")]))
                self.sources[key] = source
            fig.legend.location = "bottom_left"
            fig.legend.label_text_font_size = "10px"
            self.figures[name] = fig
        self.heading = markdown_pane("", margin=(0, 10), visible=False)
        self.panes = {name: pn.pane.Bokeh(fig) for name, fig in self.figures.items()}
        self.layout = pn.Column(self.heading, pn.Row(*self.panes.values()))

    def show(self, label: str, rank: dict[str, Any], moves: dict[str, Any]) -> None:
        """Draw ``rank`` (``layer_rank.json``) and ``moves`` (``retransformation.json``) of the network ``label``."""
        self.shown = {"label": label, "rank": rank, "moves": moves}
        steps = ["input", *rank["steps"]]
        for name, lines in LINES.items():
            report = moves if name == "moves" else rank
            drawn = []
            for key, _, _ in lines:
                values = _values(report[key])
                self.sources[key].data = {"layer": list(range(len(values))), "value": values.tolist(),
                                          "step": steps[:len(values)]}
                drawn.append(values)
            fig = self.figures[name]
            set_range(fig.x_range, finite_range(np.arange(len(steps)), pad=0.03))
            set_range(fig.y_range, finite_range(*drawn, floor=0.0))
        self.heading.object = (f"#### Layers of {md(label, one_line=True)}: {md(len(steps) - 1)} residual steps, "
                               f"last layer's probe accuracy {_values(rank['probe_acc'])[-1]:.3f}")
        self.heading.visible = True

    def points(self) -> dict[str, int]:
        """Points drawn per line (tests)."""
        return {key: len(source.data["layer"]) for key, source in self.sources.items()}
