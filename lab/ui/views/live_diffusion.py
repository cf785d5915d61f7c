"""The views of diffusion runs that differ in α_min, redrawn in place as they train.

*Residual Connections Harm Generative Representation Learning* (§5, Table 4) trains U-ViTs whose identity shortcuts
decay to α_min and reports two numbers per α_min: FID (sample quality) and the accuracy of a linear probe on the
best (block, noise level) of the frozen network. One :class:`DiffusionViews` draws, over training and per α_min:
the held-out ε-loss, digits-FD (FID's toy stand-in: :mod:`lab.analysis.frechet`), the best probe accuracy; and per
member its newest grid of samples and its probe accuracy over (block, noise level), the grid whose best cell is the
paper's number. Each α schedule over the residual sub-layers is drawn before anything trains.

Raw Bokeh figures with fixed frames, sources replaced inside ``pn.io.unlocked()``, ranges set from the data drawn;
colour encodes α_min as on the Rank page (dark: small, bright: 1).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import panel as pn
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, Range1d
from bokeh.palettes import Viridis256
from bokeh.plotting import figure
from PIL import Image

from lab.ui.text import markdown_pane
from lab.ui.views.live_rank import member_colors, side_legend
from lab.ui.views.ranges import finite_range, set_range

CURVES = {"test_loss": "held-out ε-loss", "digits_fd": "digits-FD (lower is better)",
          "probe_top1": "best probe accuracy"}
"""The metrics drawn over training, by their key in metrics.jsonl."""
CAPTION = ("Table 4 of the paper at toy scale: U-ViTs that differ only in α_min, trained on the same digits in "
           "lockstep. Over training: the held-out ε-prediction loss, **digits-FD** (the Fréchet distance of samples "
           "from the training digits in a digits classifier's features: comparable across these runs, never with a "
           "published FID) and the linear-probe accuracy of the best (block, noise level). Per α_min: its newest "
           "samples (the same noise at every evaluation) and the probe accuracy of every block at every noise level.")
PAD = 0.06
EMPTY_LINES = {"xs": [], "ys": [], "color": [], "alpha_min": [], "label": []}
EMPTY_DOTS = {"x": [], "y": [], "color": [], "alpha_min": []}


def png_rgba(data: bytes) -> np.ndarray:
    """A PNG as Bokeh's ``image_rgba`` wants it: ``[H, W]`` uint32 RGBA, bottom row first."""
    rgba = np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"), dtype=np.uint8)
    return np.ascontiguousarray(rgba[::-1]).view(np.uint32)[..., 0]


class DiffusionViews:
    """All views of a group of diffusion runs (members) that differ in α_min.

    Args:
        size: side of a figure's frame in screen pixels.
    """

    def __init__(self, size: int = 300) -> None:
        self.size = size
        self.alpha_mins: list[float] = []
        self.colors: list[str] = []
        self.records: list[dict[str, list[float]]] = []  # per member: step and each curve's values
        self.samples_step: list[int] = []  # per member: the step of the samples drawn (-1: none yet)
        self.probe_step: list[int] = []
        tools = "pan,wheel_zoom,box_zoom,reset,save"
        self.curves: dict[str, tuple[figure, ColumnDataSource, ColumnDataSource]] = {}
        for key, label in CURVES.items():  # lines, and a dot per evaluation (the first one has no line yet)
            source = ColumnDataSource(EMPTY_LINES, name=f"curve_{key}")
            dots = ColumnDataSource(EMPTY_DOTS, name=f"dots_{key}")
            fig = figure(title=f"{label[0].upper()}{label[1:]}", frame_width=size, frame_height=size - 60,
                         x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools=tools, x_axis_label="step",
                         y_axis_label=label)
            lines = fig.multi_line("xs", "ys", color="color", line_width=2, source=source)
            r = fig.scatter("x", "y", color="color", size=6, source=dots)
            side_legend(fig, lines, "label", "α_min")
            fig.add_tools(HoverTool(renderers=[r], tooltips=[("α_min", "@alpha_min"), ("step", "@x"), (key, "@y")]))
            self.curves[key] = (fig, source, dots)
        self.schedule_src = ColumnDataSource(EMPTY_LINES, name="alphas")
        self.schedule = figure(title="α per residual sub-layer", frame_width=size, frame_height=size - 60,
                               x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools=tools,
                               x_axis_label="sub-layer (attention, MLP; in → mid → out)", y_axis_label="α")
        r = self.schedule.multi_line("xs", "ys", color="color", line_width=2, source=self.schedule_src)
        self.schedule.add_tools(HoverTool(renderers=[r], tooltips=[("α_min", "@alpha_min")]))
        side_legend(self.schedule, r, "label", "α_min")
        self.summary = markdown_pane("Start to train one U-ViT per α_min.", margin=(0, 10))
        self.caption = markdown_pane(CAPTION, margin=(0, 10), width=3 * size)
        self.members = pn.Column()
        panes = [*(pn.pane.Bokeh(fig) for fig, _, _ in self.curves.values()), pn.pane.Bokeh(self.schedule)]
        self.layout = pn.Column(self.summary, self.caption, pn.Row(*panes[:2]), pn.Row(*panes[2:]), self.members)
        self.sample_figs: list[tuple[figure, ColumnDataSource]] = []
        self.probe_figs: list[tuple[figure, ColumnDataSource, LinearColorMapper]] = []
        self.labels: list[pn.pane.Markdown] = []

    # -- members ----------------------------------------------------------------------------------------------
    def set_members(self, alpha_mins: Sequence[float], alphas: Sequence[Sequence[float]]) -> None:
        """Start over with one member per α_min; ``alphas`` holds each one's α per residual sub-layer. The same
        members as before keep their figures, emptied (a figure replaced in a served page lingers in its
        document)."""
        same = [float(a) for a in alpha_mins] == self.alpha_mins
        self.alpha_mins = [float(a) for a in alpha_mins]
        self.colors = member_colors(np.asarray(self.alpha_mins))
        self.records = [{"step": [], **{key: [] for key in CURVES}} for _ in self.alpha_mins]
        self.samples_step = [-1] * len(self.alpha_mins)
        self.probe_step = [-1] * len(self.alpha_mins)
        if not same:
            self._member_figures()
        with pn.io.unlocked():
            for k, a in enumerate(self.alpha_mins):
                self.sample_figs[k][1].data = {"image": [], "dw": [], "dh": []}
                self.sample_figs[k][0].title.text = f"Samples, α_min = {a:g}"
                self.probe_figs[k][1].data = {"image": [], "x": [], "y": [], "dw": [], "dh": []}
                self.probe_figs[k][0].title.text = f"Probe accuracy, α_min = {a:g}"
                self._label(k)
            for _, source, dots in self.curves.values():
                source.data, dots.data = dict(EMPTY_LINES), dict(EMPTY_DOTS)
            self.schedule_src.data = {"xs": [np.arange(1, len(a) + 1) for a in alphas], "ys": [list(a) for a in alphas],
                                      "color": self.colors, "alpha_min": self.alpha_mins,
                                      "label": [f"{a:g}" for a in self.alpha_mins]}
            longest = max((len(a) for a in alphas), default=1)
            set_range(self.schedule.x_range, (0.5, longest + 0.5))
            set_range(self.schedule.y_range, finite_range(*alphas, floor=0.0, pad=PAD))
        self.summary.object = "Start to train one U-ViT per α_min."

    def _member_figures(self) -> None:
        """New samples and probe figures, one pair per member."""
        self.sample_figs, self.probe_figs, self.labels, rows = [], [], [], []
        for a in self.alpha_mins:
            samples = figure(title=f"Samples, α_min = {a:g}", frame_width=self.size, frame_height=self.size,
                             x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools="save", match_aspect=True)
            samples.axis.visible = samples.grid.visible = False
            sample_src = ColumnDataSource({"image": [], "dw": [], "dh": []}, name=f"samples_{a:g}")
            samples.image_rgba(image="image", x=0, y=0, dw="dw", dh="dh", source=sample_src)
            mapper = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0)
            probe = figure(title=f"Probe accuracy, α_min = {a:g}", frame_width=self.size, frame_height=self.size - 60,
                           x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools="hover,save",
                           x_axis_label="block (in → mid → out)", y_axis_label="noise level t",
                           tooltips=[("block", "$x{0}"), ("accuracy", "@image{0.000}")])
            probe_src = ColumnDataSource({"image": [], "x": [], "y": [], "dw": [], "dh": []}, name=f"probe_{a:g}")
            probe.image(image="image", x="x", y="y", dw="dw", dh="dh", color_mapper=mapper, source=probe_src)
            probe.add_layout(ColorBar(color_mapper=mapper, width=10, title="accuracy"), "right")
            label = markdown_pane("", margin=(0, 10))
            self.sample_figs.append((samples, sample_src))
            self.probe_figs.append((probe, probe_src, mapper))
            self.labels.append(label)
            rows.append(pn.Column(label, pn.Row(pn.pane.Bokeh(samples), pn.pane.Bokeh(probe))))
        self.members[:] = rows

    # -- input ------------------------------------------------------------------------------------------------
    def extend(self, member: int, records: list[dict[str, Any]]) -> None:
        """Add member ``member``'s new metric records (its evaluations) and redraw the curves."""
        evals = [r for r in records if r.get("kind") == "eval"]
        if not evals or member >= len(self.records):
            return
        mine = self.records[member]
        for r in evals:
            mine["step"].append(float(r["step"]))
            for key in CURVES:
                value = r.get(key)
                mine[key].append(float(value) if isinstance(value, (int, float)) else math.nan)
        with pn.io.unlocked():
            for key, (fig, source, dots) in self.curves.items():
                shown = [k for k, rec in enumerate(self.records) if np.isfinite(rec[key]).any()]
                source.data = {"xs": [self.records[k]["step"] for k in shown],
                               "ys": [self.records[k][key] for k in shown],
                               "color": [self.colors[k] for k in shown],
                               "alpha_min": [self.alpha_mins[k] for k in shown],
                               "label": [f"{self.alpha_mins[k]:g}" for k in shown]}
                points = [(s, v, k) for k in shown for s, v in zip(self.records[k]["step"], self.records[k][key],
                                                                    strict=True) if math.isfinite(v)]
                dots.data = {"x": [p[0] for p in points], "y": [p[1] for p in points],
                             "color": [self.colors[p[2]] for p in points],
                             "alpha_min": [self.alpha_mins[p[2]] for p in points]}
                steps = [s for k in shown for s in self.records[k]["step"]]
                set_range(fig.x_range, finite_range(steps, floor=0.0, pad=PAD, point=1.0))
                set_range(fig.y_range, finite_range(*(self.records[k][key] for k in shown), pad=PAD))
        self.summary.object = self.describe()

    def show_samples(self, member: int, step: int, png: bytes) -> None:
        """Draw member ``member``'s grid of samples of ``step`` (the PNG its run wrote)."""
        image = png_rgba(png)
        fig, source = self.sample_figs[member]
        h, w = image.shape
        with pn.io.unlocked():
            source.data = {"image": [image], "dw": [w], "dh": [h]}
            set_range(fig.x_range, (0, w))
            set_range(fig.y_range, (0, h))
            fig.title.text = f"Samples, α_min = {self.alpha_mins[member]:g}, step {step}"
        self.samples_step[member] = step
        self._label(member)

    def show_probe(self, member: int, step: int, accuracy: np.ndarray, times: Sequence[float]) -> None:
        """Draw member ``member``'s probe accuracy ``[T, L]`` over (noise level, block) of ``step``."""
        accuracy = np.asarray(accuracy, np.float64)
        fig, source, mapper = self.probe_figs[member]
        T, L = accuracy.shape
        with pn.io.unlocked():
            source.data = {"image": [accuracy], "x": [-0.5], "y": [-0.5], "dw": [L], "dh": [T]}
            low = float(np.nanmin(accuracy))
            mapper.update(low=low, high=max(float(np.nanmax(accuracy)), low + 1e-3))
            set_range(fig.x_range, (-0.5, L - 0.5))
            set_range(fig.y_range, (-0.5, T - 0.5))
            fig.yaxis.ticker = list(range(T))
            fig.yaxis.major_label_overrides = {i: f"{t:g}" for i, t in enumerate(times)}
            i, j = divmod(int(np.nanargmax(accuracy)), L)
            fig.title.text = f"Probe, α_min = {self.alpha_mins[member]:g}: best {accuracy[i, j]:.2f}"
            fig.xaxis.axis_label = f"block (in → mid → out); best: block {j}, t = {times[i]:g}"
        self.probe_step[member] = step
        self._label(member)

    # -- text -------------------------------------------------------------------------------------------------
    def _label(self, member: int) -> None:
        parts = [f"samples of step {self.samples_step[member]}" if self.samples_step[member] >= 0 else "no samples yet",
                 f"probes of step {self.probe_step[member]}" if self.probe_step[member] >= 0 else "no probe yet"]
        self.labels[member].object = f"**α_min = {self.alpha_mins[member]:g}**: " + ", ".join(parts)

    def describe(self) -> str:
        """One line per member: its latest evaluation's numbers."""
        lines = []
        for a, rec in zip(self.alpha_mins, self.records, strict=True):
            if not rec["step"]:
                lines.append(f"- α_min {a:g}: no evaluation yet")
                continue
            numbers = ", ".join(f"{label.split(' (')[0]} {rec[key][-1]:.4g}" for key, label in CURVES.items()
                                if math.isfinite(rec[key][-1]))
            lines.append(f"- α_min {a:g}, step {int(rec['step'][-1])}: {numbers}")
        return "\n".join(lines)
