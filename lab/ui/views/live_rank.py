"""The views of an α_min sweep's rank snapshots (:class:`lab.jobs.sweep_job.SweepJob`), redrawn in place.

*Residual Connections Harm Generative Representation Learning* (§6) relates α_min, the effective rank of the
features and linear-probe accuracy: its Figure 6 for MAE on ImageNet-100, its Figure 9 for the supervised
analogue, which is what a toy sweep trained on labels shows. One :class:`RankViews` draws: rank by layer per member
beside each member's α schedule; final-layer rank and probe accuracy over training; probe accuracy against α_min
and rank against probe accuracy with Pearson's r; per-member embeddings of the final features; train/test accuracy
per member. The rank measure is chosen: Roy & Vetterli's effective rank exp(H), or the paper's Eq. 6 entropy H of
the sample-by-sample covariance (the number its figures plot). Raw Bokeh figures, sources replaced inside
``pn.io.unlocked()``, ranges set from the data drawn.

Colour encodes α_min (dark: small, bright: 1) and every figure that uses it has a legend titled α_min; figures
have fixed frames, two to a row, with titles that fit over them (what a title cannot say is in the caption).
"""

from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.core.properties import field
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, Range1d
from bokeh.palettes import Category10_10, Viridis256
from bokeh.plotting import figure

from lab.ui.text import markdown_pane
from lab.ui.views.plain_text import plain
from lab.ui.views.ranges import finite_range, set_range
from lab.viz.palette import BLUE, ORANGE

MEASURES = {"effective_rank": "effective rank exp(H) (Roy & Vetterli)",
            "eq6_entropy": "Eq. 6 entropy H of the sample covariance"}
AXIS = {"effective_rank": "effective rank exp(H)", "eq6_entropy": "Eq. 6 entropy H"}
"""The measures' short names (axis labels and titles)."""
CAPTION = ("The supervised analogue of the paper's **Figure 9** (its Figure 6 is the same study for MAE on "
           "ImageNet-100): per α_min, the rank of each layer's features and linear-probe accuracy over training, and "
           "across members, probe accuracy against α_min and against the final layer's rank (Pearson r).")
GENERATIVE_CAPTIONS = {
    "unet": "The lab's **toy MAE**, the structure of the paper's §3.2: an encoder whose shortcuts decay to α_min, a "
            "decoder at α = 1 and U-Net skips from the encoder to the decoder. Per α_min: the rank of each layer's "
            "features, and probes of the **encoder's output** (the bottleneck, the representation the paper "
            "probes) — the full ridge probe, and one fitted on five digits of each class (`probe_few`, the lab's "
            "addition: on 8 × 8 digits the full probe sits near its ceiling), over training and across members.",
    "no_skips": "**Table 3a's ablation**: the toy MAE without its U-Net skips, so its bottleneck must carry every "
                "pixel the decoder needs. The paper expects its probe to fall (61.5 against 83.6 with the skips, "
                "ViT-B/16 on ImageNet-100).",
    "no_decoder": "**No encoder-decoder split**: the residual MLP's shortcuts decay all the way to its output, whose "
                  "features must carry every pixel, and the probes read that last layer — the setting the paper "
                  "argues decay cannot help (§3.2), a stronger ablation than Table 3a's.",
}
"""The caption of a generative sweep (:mod:`lab.train.tasks`) by its model's structure (:func:`structure_of`)."""
TASK_WORDS = {"masked": "The members reconstruct the hidden half of each digit's pixels (the MAE analogue).",
              "denoise": "The members predict the noise of noised digits (the diffusion analogue); the probes read "
                         "digits noised to t = 0.1, a level inside the training range."}
FINDING = ("Measured by `lab reproduce --budget cpu` (the toy MAE of `configs/toy_mae_digits.yaml`, masked task, "
           "six seeds, a 16-wide bottleneck, three quarters of each digit hidden; its report has the numbers, "
           "intervals, verdicts and power).")
"""Where a generative sweep's numbers over seeds are measured."""


def structure_of(snapshot: dict[str, np.ndarray]) -> str:
    """``unet``, ``no_skips`` or ``no_decoder``: the structure of a snapshot's members (:data:`GENERATIVE_CAPTIONS`)."""
    return str(snapshot["structure"]) if "structure" in snapshot else "no_decoder"


PER_ROW = 2
"""Figures per row: each keeps its full frame, and two fit beside the sidebar, served or in a notebook."""
EMBEDS_PER_ROW = 5
FAILED_ACC = 0.6
"""A member whose test accuracy ends below this (the toy sets are two balanced classes) did not learn."""
FAILED_LOSS = 0.95
"""A member of a generative task whose held-out loss ends above this did not learn: on standardised pixels,
predicting zeros (the hidden pixels' mean, or the noise's) scores about 1."""
PAD = 0.06
"""Margin of every fitted range, as a fraction of its data's span."""


def member_colors(alpha_min: np.ndarray) -> list[str]:
    """One colour per member from its α_min: dark for small α_min, bright for 1."""
    lo, hi = float(np.min(alpha_min)), float(np.max(alpha_min))
    span = hi - lo if hi > lo else 1.0
    return [Viridis256[int(round(230 * (a - lo) / span))] for a in alpha_min]


def side_legend(fig: figure, renderer, column: str, title: str) -> Legend:
    """A legend right of ``fig``'s frame with one entry per value of ``column`` (grouped in the browser, so it
    follows the source's data)."""
    legend = Legend(items=[LegendItem(label=field(column), renderers=[renderer])], title=title, location="top_left",
                    label_text_font_size="10px", title_text_font_size="10px", glyph_height=12, glyph_width=14,
                    spacing=0, padding=4, margin=4)
    fig.add_layout(legend, "right")
    return legend


def _labels(alpha_min: np.ndarray, names: list[str]) -> list[str]:
    """Each member's legend entry: its α_min, or its name where two members share an α_min."""
    values = list(alpha_min)
    return [f"{a:g}" if values.count(a) == 1 else n for a, n in zip(values, names, strict=True)]


class RankViews:
    """All views of one sweep's rank snapshots.

    Args:
        size: plot side in screen pixels.
    """

    def __init__(self, size: int = 300) -> None:
        self.snapshot: dict[str, np.ndarray] | None = None
        self.measure = "effective_rank"
        self.embedding = "pca"
        self.umap: dict[int, np.ndarray] = {}  # member -> UMAP of its final features, for the snapshot on screen
        self.history: dict[str, list] = {"step": [], "effective_rank": [], "eq6_entropy": [], "probe": [],
                                         "r_effective_rank": [], "r_eq6_entropy": []}
        tools = "pan,wheel_zoom,box_zoom,reset,save"
        line_tips = [("α_min", "@alpha_min"), ("member", "@name")]
        self.legends: list[Legend] = []  # α_min legends (two columns of entries for many members)

        def lines_figure(title: str, x_label: str, y_label: str, name: str) -> tuple[figure, ColumnDataSource]:
            source = ColumnDataSource(data={"xs": [], "ys": [], "color": [], "alpha_min": [], "label": [],
                                            "name": []}, name=name)
            fig = figure(title=title, frame_width=size, frame_height=size - 60, x_range=Range1d(0, 1),
                         y_range=Range1d(0, 1), tools=tools, x_axis_label=x_label, y_axis_label=y_label)
            r = fig.multi_line("xs", "ys", color="color", source=source, line_width=2)
            fig.add_tools(HoverTool(renderers=[r], tooltips=line_tips))
            self.legends.append(side_legend(fig, r, "label", "α_min"))
            return fig, source

        self.by_layer, self.by_layer_src = lines_figure("Rank by layer", "layer (0 = stem)", "rank", "rank_by_layer")
        self.schedules, self.schedules_src = lines_figure("α per block (the schedules)", "block", "α", "alphas")
        self.rank_time, self.rank_time_src = lines_figure("Final-layer rank over training", "step", "rank",
                                                          "rank_over_training")
        self.probe_time, self.probe_time_src = lines_figure("Probe accuracy over training", "step",
                                                            "linear-probe accuracy", "probe_over_training")

        self.points = ColumnDataSource(data={"alpha_min": [], "probe": [], "rank": [], "color": [], "label": [],
                                             "name": []})
        point_tips = [("α_min", "@alpha_min"), ("probe acc", "@probe{0.000}"), ("rank", "@rank{0.00}")]

        def probe_figure(title: str, x: str, x_label: str) -> figure:
            """Final-layer probe accuracy against the column ``x`` of :attr:`points`, one dot per member."""
            fig = figure(title=title, frame_width=size, frame_height=size - 60, x_range=Range1d(0, 1),
                         y_range=Range1d(0, 1), tools=tools, x_axis_label=x_label,
                         y_axis_label="final-layer probe accuracy")
            r = fig.scatter(x, "probe", color="color", size=10, source=self.points)
            fig.add_tools(HoverTool(renderers=[r], tooltips=point_tips))
            self.legends.append(side_legend(fig, r, "label", "α_min"))
            return fig

        self.probe_alpha = probe_figure("Probe accuracy against α_min", "alpha_min", "α_min")
        self.rank_probe = probe_figure("Rank vs probe accuracy", "rank", "final-layer rank")

        self.accuracy_src = ColumnDataSource(data={"x": [], "value": [], "color": [], "split": [], "member": []},
                                             name="accuracy_per_member")
        self.accuracy = figure(title="Accuracy per member", frame_width=size,
                               frame_height=size - 60, x_range=Range1d(0, 1), y_range=Range1d(0, 1.02),
                               tools="hover,save", y_axis_label="accuracy",
                               tooltips=[("member", "@member"), ("split", "@split"), ("value", "@value{0.000}")])
        r = self.accuracy.vbar(x="x", top="value", width=0.4, color="color", source=self.accuracy_src)
        side_legend(self.accuracy, r, "split", "")
        self.accuracy.xaxis.major_label_orientation = 0.9

        self.embed_src: list[ColumnDataSource] = []
        self.embeds: list[figure] = []
        self.embed_panes: list[pn.pane.Bokeh] = []
        self.embed_box = pn.Column()  # rows of panes, not a FlexBox: figures inside one never report "rendered"
        self.summary = markdown_pane("No snapshot yet: start a sweep.", margin=(0, 10))
        self.caption = markdown_pane(CAPTION, margin=(0, 10), width=860)
        self.panes = {name: pn.pane.Bokeh(fig) for name, fig in (
            ("by_layer", self.by_layer), ("schedules", self.schedules), ("rank_time", self.rank_time),
            ("probe_time", self.probe_time), ("probe_alpha", self.probe_alpha), ("rank_probe", self.rank_probe),
            ("accuracy", self.accuracy))}
        panes = list(self.panes.values())
        self.layout = pn.Column(self.summary, self.caption,
                                *(pn.Row(*panes[k:k + PER_ROW]) for k in range(0, len(panes), PER_ROW)),
                                markdown_pane("#### Final features per member, coloured by class (blue: class 0, "
                                                 "orange: class 1)", margin=(0, 10)),
                                self.embed_box)

    # -- input --------------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Forget the snapshots (a new sweep)."""
        self.snapshot = None
        self.umap = {}
        for values in self.history.values():
            values.clear()

    def show(self, snapshot: dict[str, np.ndarray]) -> None:
        """Draw a new snapshot and add its final-layer numbers to the history."""
        self.snapshot = snapshot
        self.umap = {}
        h = self.history
        if not h["step"] or int(snapshot["step"]) > h["step"][-1]:
            h["step"].append(int(snapshot["step"]))
            for key in ("effective_rank", "eq6_entropy"):
                h[key].append(np.asarray(snapshot[key])[:, _layer(snapshot)].astype(np.float64))
                h[f"r_{key}"].append(float(snapshot[f"pearson_r_{key}"]))
            h["probe"].append(np.asarray(snapshot["probe_acc"])[:, _layer(snapshot)].astype(np.float64))
        self.redraw()

    def set_measure(self, measure: str) -> None:
        """Draw ``effective_rank`` or ``eq6_entropy`` (only the rank views change)."""
        self.measure = measure
        if self.snapshot is not None:
            with pn.io.unlocked():
                self._lines()
                self._scatter()

    def set_embedding(self, kind: str, umap: dict[int, np.ndarray] | None = None) -> None:
        """Show the PCA (``"pca"``) or UMAP (``"umap"``, with its coordinates per member) of the final features."""
        self.embedding = kind
        if umap is not None:
            self.umap = umap
        if self.snapshot is not None:
            with pn.io.unlocked():
                self._embeddings()

    # -- drawing ------------------------------------------------------------------------------------------------
    def redraw(self) -> None:
        if self.snapshot is None:
            return
        with pn.io.unlocked():
            self._lines()
            self._scatter()
            self._accuracy()
            self._embeddings()
        self.summary.object = self.describe()
        structure = GENERATIVE_CAPTIONS[structure_of(self.snapshot)]
        self.caption.object = (CAPTION if self.task == "classify" else
                               f"{structure} {TASK_WORDS[self.task]}\n\n{FINDING}")

    def _members(self) -> tuple[np.ndarray, list[str], list[str], np.ndarray]:
        f = self.snapshot
        alpha_min = np.asarray(f["alpha_min"], np.float64)
        names = [str(n) for n in f["member_names"]]
        live = ~np.asarray(f["diverged"], bool)
        return alpha_min, member_colors(alpha_min), names, live

    def _lines(self) -> None:
        f = self.snapshot
        alpha_min, colors, names, live = self._members()
        keep = [k for k in range(len(names)) if live[k]]
        rank = np.asarray(f[self.measure], np.float64)

        labels = _labels(alpha_min, names)

        def lines(xs: list, ys: list) -> dict:
            return {"xs": xs, "ys": ys, "color": [colors[k] for k in keep], "alpha_min": [alpha_min[k] for k in keep],
                    "label": [labels[k] for k in keep], "name": [names[k] for k in keep]}

        for legend in self.legends:  # many members: entries in two columns, so the legend fits the figure
            legend.ncols = 1 if len(keep) <= 10 else 2

        layers = np.arange(rank.shape[1])
        self.by_layer_src.data = lines([layers] * len(keep), [rank[k] for k in keep])
        self.by_layer.title.text = f"Rank by layer: {AXIS[self.measure]}"
        for fig in (self.by_layer, self.rank_time):
            fig.yaxis.axis_label = AXIS[self.measure]
        self.rank_probe.xaxis.axis_label = f"final-layer {AXIS[self.measure]}"
        set_range(self.by_layer.x_range, (-0.5, rank.shape[1] - 0.5))
        set_range(self.by_layer.y_range, finite_range(rank[keep], pad=PAD) if keep else (0, 1))
        alphas = np.asarray(f["alphas"], np.float64)
        blocks = np.arange(1, alphas.shape[1] + 1)
        self.schedules_src.data = lines([blocks] * len(keep), [alphas[k] for k in keep])
        set_range(self.schedules.x_range, (0.5, alphas.shape[1] + 0.5))
        set_range(self.schedules.y_range, finite_range(alphas, floor=0.0, pad=PAD))
        h = self.history
        steps = np.asarray(h["step"], np.float64)
        ranks = np.stack(h[self.measure]) if h["step"] else np.zeros((0, len(names)))
        probes = np.stack(h["probe"]) if h["step"] else np.zeros((0, len(names)))
        self.rank_time_src.data = lines([steps] * len(keep), [ranks[:, k] for k in keep])
        self.probe_time_src.data = lines([steps] * len(keep), [probes[:, k] for k in keep])
        for fig, values in ((self.rank_time, ranks[:, keep]), (self.probe_time, probes[:, keep])):
            last = float(steps[-1]) if len(steps) else 1.0
            set_range(fig.x_range, finite_range(steps, pad=PAD) if len(steps) > 1 else (0, max(1.0, last)))
            set_range(fig.y_range, finite_range(values, pad=PAD))

    def _scatter(self) -> None:
        f = self.snapshot
        alpha_min, colors, names, live = self._members()
        rank = np.asarray(f[self.measure], np.float64)[:, _layer(f)]
        probe = np.asarray(f["probe_acc"], np.float64)[:, _layer(f)]
        keep = [k for k in range(len(names)) if live[k]]
        labels = _labels(alpha_min, names)
        self.points.data = {"alpha_min": alpha_min[keep], "probe": probe[keep], "rank": rank[keep],
                            "color": [colors[k] for k in keep], "label": [labels[k] for k in keep],
                            "name": [names[k] for k in keep]}
        set_range(self.probe_alpha.x_range, finite_range(alpha_min, pad=PAD))
        set_range(self.probe_alpha.y_range, finite_range(probe[keep], pad=PAD))
        set_range(self.rank_probe.x_range, finite_range(rank[keep], pad=PAD))
        set_range(self.rank_probe.y_range, finite_range(probe[keep], pad=PAD))
        r = float(f[f"pearson_r_{self.measure}"])
        self.rank_probe.title.text = (f"Rank vs probe accuracy: Pearson r {r:.3f}" if math.isfinite(r)
                                      else "Rank vs probe: Pearson r needs 3 members")

    def _accuracy(self) -> None:
        f = self.snapshot
        alpha_min, _, names, _ = self._members()
        labels = [f"α_min {a:g}" if list(alpha_min).count(a) == 1 else n for a, n in zip(alpha_min, names,
                                                                                        strict=True)]
        K = len(labels)
        splits = [("train", -0.2, BLUE), ("test", 0.2, ORANGE)]
        measure = "acc" if self.task == "classify" else "loss"  # a generative task has losses, no accuracy
        values = [float(f[f"{split}_{measure}"][k]) for k in range(K) for split, _, _ in splits]
        if measure == "loss":
            self.accuracy.title.text = "Loss per member"  # the task is the snapshot's: plain text, never typeset
            self.accuracy.yaxis.axis_label = plain(f"{self.task} loss (MSE)")
            set_range(self.accuracy.y_range, (0.0, 1.05 * max([1.0, *(v for v in values if math.isfinite(v))])))
        else:
            self.accuracy.title.text, self.accuracy.yaxis.axis_label = "Accuracy per member", "accuracy"
            set_range(self.accuracy.y_range, (0.0, 1.02))
        self.accuracy_src.data = {"x": [k + dx for k in range(K) for _, dx, _ in splits],
                                  "value": np.nan_to_num(values, nan=0.0),
                                  "color": [c for _ in range(K) for *_, c in splits],
                                  "split": [s for _ in range(K) for s, _, _ in splits],
                                  "member": [label for label in labels for _ in splits]}
        self.accuracy.xaxis.ticker = list(range(K))
        # a member's name comes from the snapshot: plain text, never typeset as TeX (lab.ui.views.plain_text)
        self.accuracy.xaxis.major_label_overrides = {k: plain(label) for k, label in enumerate(labels)}
        set_range(self.accuracy.x_range, (-0.6, K - 0.4))

    def _embeddings(self) -> None:
        f = self.snapshot
        alpha_min, _, names, live = self._members()
        labels = np.asarray(f["labels"])
        while len(self.embeds) < len(names):
            source = ColumnDataSource(data={"x": [], "y": [], "color": []})
            fig = figure(frame_width=200, frame_height=200, tools="save", x_range=Range1d(0, 1),
                         y_range=Range1d(0, 1), title="")
            fig.scatter("x", "y", color="color", source=source, size=3, alpha=0.7)
            fig.axis.visible = False
            self.embed_src.append(source)
            self.embeds.append(fig)
            self.embed_panes.append(pn.pane.Bokeh(fig))
        if sum(len(row) for row in self.embed_box) != len(self.embed_panes):
            self.embed_box[:] = [pn.Row(*self.embed_panes[k:k + EMBEDS_PER_ROW])
                                 for k in range(0, len(self.embed_panes), EMBEDS_PER_ROW)]
        for k, (fig, source) in enumerate(zip(self.embeds, self.embed_src, strict=True)):
            visible = k < len(names)
            self.embed_panes[k].visible = visible
            if not visible:
                continue
            xy = self.umap.get(k) if self.embedding == "umap" else None
            xy = np.asarray(f["pca"][k] if xy is None else xy, np.float64)
            source.data = {"x": xy[:, 0], "y": xy[:, 1], "color": [Category10_10[int(c) % 10] for c in labels]}
            set_range(fig.x_range, finite_range(xy[:, 0], pad=PAD))
            set_range(fig.y_range, finite_range(xy[:, 1], pad=PAD))
            kind = "UMAP" if self.embedding == "umap" and k in self.umap else "PCA"
            fig.title.text = f"α_min {alpha_min[k]:g} ({kind})" + ("" if live[k] else ": diverged")

    # -- words --------------------------------------------------------------------------------------------------
    def failed(self) -> list[str]:
        """Why each member that did not learn failed: diverged, test accuracy below :data:`FAILED_ACC`, or (a
        generative task) held-out loss above :data:`FAILED_LOSS`."""
        if self.snapshot is None:
            return []
        f = self.snapshot
        alpha_min, _, names, live = self._members()
        out = []
        for k, name in enumerate(names):
            acc, loss, evaluated = float(f["test_acc"][k]), float(f["test_loss"][k]), int(f["eval_step"][k]) >= 0
            if not live[k]:
                out.append(f"α_min {alpha_min[k]:g} ({name}) diverged")
            elif evaluated and self.task == "classify" and math.isfinite(acc) and acc < FAILED_ACC:
                out.append(f"α_min {alpha_min[k]:g} ({name}) is at {acc:.0%} test accuracy")
            elif evaluated and self.task != "classify" and math.isfinite(loss) and loss > FAILED_LOSS:
                out.append(f"α_min {alpha_min[k]:g} ({name}) is at a held-out loss of {loss:.3f} (predicting zeros "
                           "scores about 1)")
        return out

    @property
    def task(self) -> str:
        """What the snapshot's members learn: ``classify`` or a generative task."""
        return str(self.snapshot["task"]) if self.snapshot is not None and "task" in self.snapshot else "classify"

    def describe(self) -> str:
        f = self.snapshot
        if f is None:
            return "No snapshot yet: start a sweep."
        r = {key: float(f[f"pearson_r_{key}"]) for key in MEASURES}
        words = ", ".join(f"{key.replace('_', ' ')} {v:.3f}" if math.isfinite(v) else f"{key.replace('_', ' ')} n/a"
                          for key, v in r.items())
        return f"**Step {int(f['step'])}.** Pearson r of final-layer rank and probe accuracy across members: {words}."

    def counts(self) -> dict[str, int]:
        """How many items each view draws (tests: every view shows data)."""
        return {"by_layer": len(self.by_layer_src.data["xs"]), "schedules": len(self.schedules_src.data["xs"]),
                "rank_time": len(self.rank_time_src.data["xs"]), "probe_time": len(self.probe_time_src.data["xs"]),
                "points": len(self.points.data["probe"]), "accuracy": len(self.accuracy_src.data["x"]),
                "embeddings": sum(len(s.data["x"]) > 0 for s in self.embed_src)}

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout


def _layer(snapshot: dict[str, np.ndarray]) -> int:
    """The depth of the members' representation in ``snapshot``: the last layer, or a toy MAE's bottleneck."""
    return int(snapshot["layer"]) if "layer" in snapshot else -1
