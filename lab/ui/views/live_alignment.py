"""The views of a Residual Alignment snapshot (:func:`lab.snapshots.builders.alignment_builder`), redrawn in place.

One :class:`AlignmentViews` draws one run: RA1 trajectories, the RA2 mosaic of alignment matrices with one pair
enlarged, RA3 spectra, RA4 1/σ₁ with its fitted line, and neural collapse by layer. Every figure is a raw Bokeh
figure whose sources are replaced and whose ranges are set from the data drawn, so a view can never show an empty
frame while its data sits outside it; changes happen inside ``pn.io.unlocked()`` (see :mod:`lab.ui.views.live_grid`).

Every figure has a fixed frame, a title that fits over it, and its legend or colour bar beside or below the frame:
a layout places the figures (:data:`VIEWS`, two per row stand-alone, or paired with a second run's on the
Alignment page) and never squeezes them. The two images (mosaic and pair) are drawn in matrix orientation: the y
range runs from the image's height at the bottom to 0 at the top, and the image sits at (0, 0) with Bokeh's
default anchor and origin (bottom left in data coordinates, which is the top of the screen here), so array row 0
is the top row of the plot.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import panel as pn
from bokeh.core.properties import value
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, Range1d, Span
from bokeh.palettes import Category10_10, RdBu11, Viridis256
from bokeh.plotting import figure

from lab.analysis.residual_alignment import alignment_reasons
from lab.ui.text import markdown_pane, md
from lab.ui.views.ranges import finite_range, set_range
from lab.viz.palette import BLUE, ORANGE

NC_LINES = (("nc1", "NC1 within/between", BLUE), ("nc2_equinorm", "NC2 equinorm", ORANGE),
            ("nc2_equiangular", "NC2 equiangular", "#2ca02c"), ("nc4", "NC4 vs NCC", "#9467bd"))
VIEWS = ("trajectories", "grid", "pair", "spectrum", "ra4", "collapse")
"""The figures of one run, in the order a page shows them."""
POINT = 0.5
"""Margin of a fitted range around a lone zero."""


REASON_NAMES = {"align_offdiag": "RA2", "topk_ratio": "RA3", "inv_sigma1_slope": "RA4", "straightness": "RA1",
                "head": "Neural collapse", "nc": "Neural collapse"}
"""The numbers whose reason the summary gives when they are n/a (RA4's R² and RA1's spacing share their
neighbour's)."""


def mosaic(grid: np.ndarray, gap: int = 1) -> np.ndarray:
    """The L × L tiles ``|A_ij|`` [L, L, K, K] laid out as one image [L·(K+gap)−gap, same], each tile divided by its
    own maximum (so its structure shows whatever its scale); gaps and undefined tiles are NaN. Row i of tiles is
    block i's Jacobian, column j the basis of block j; image row 0 is the top."""
    L, _, K, _ = grid.shape
    side = L * (K + gap) - gap
    out = np.full((side, side), np.nan, np.float32)
    a = np.abs(grid)
    scale = np.where(np.isnan(a), -np.inf, a).max(axis=(2, 3), keepdims=True)  # -inf: an undefined tile
    a = a / np.where(scale > 0, scale, 1.0)
    for i in range(L):
        for j in range(L):
            out[i * (K + gap):i * (K + gap) + K, j * (K + gap):j * (K + gap) + K] = a[i, j]
    return out


def _legend_beside(fig: figure, title: str = "") -> None:
    """Move ``fig``'s legend to the right of its frame (where it hides no data), compact."""
    legend = fig.legend[0]
    fig.center.remove(legend)
    legend.update(title=title, label_text_font_size="10px", title_text_font_size="10px", glyph_height=12,
                  glyph_width=12, spacing=0, padding=4, margin=4, location="top_left")
    fig.add_layout(legend, "right")


def _legend_below(fig: figure, ncols: int = 1) -> None:
    """Move ``fig``'s legend under its frame."""
    legend = fig.legend[0]
    fig.center.remove(legend)
    legend.update(label_text_font_size="11px", glyph_height=14, spacing=2, padding=4, margin=4, ncols=ncols,
                  location="top_left")
    fig.add_layout(legend, "below")


class AlignmentViews:
    """All views of one run's alignment snapshots.

    Args:
        label: what distinguishes this run on the page ("with skips", "without skips").
        size: plot side in screen pixels.
    """

    def __init__(self, label: str = "", size: int = 300) -> None:
        self.label = label
        self.snapshot: dict[str, np.ndarray] | None = None
        self.projection = "gauss"  # the paper's RA1 plane: two random Gaussian directions
        self.pair = (1, 0)
        tools = "pan,wheel_zoom,box_zoom,reset,save"

        self._make_ra1(size, tools)
        self._make_ra2(size, tools)
        self._make_ra3(size, tools)
        self._make_ra4(size, tools)
        self._make_nc(size, tools)

        self.summary = markdown_pane("No snapshot yet: start a run.", margin=(0, 10))
        self.figures = dict(zip(VIEWS, (self.trajectories, self.grid, self.pair_figure, self.spectrum, self.ra4,
                                        self.collapse), strict=True))
        self.panes = {name: pn.pane.Bokeh(fig) for name, fig in self.figures.items()}
        self.heading = markdown_pane(f"### {md(label, one_line=True)}", margin=(0, 10), visible=bool(label))
        panes = list(self.panes.values())  # rows of two, not a FlexBox: figures inside one never report "rendered"
        self.layout = pn.Column(self.heading, self.summary, *(pn.Row(*panes[k:k + 2]) for k in range(0, 6, 2)))

    def _make_ra1(self, size: int, tools: str) -> None:
        """RA1: the trajectories of the class means through the blocks."""
        self.paths = ColumnDataSource(data={"xs": [], "ys": [], "color": [], "label": []})
        self.means = ColumnDataSource(data={"x": [], "y": [], "color": [], "label": [], "layer": []})
        self.trajectories = figure(title="RA1 trajectories", frame_width=size, frame_height=size,
                                   x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools=tools)
        self.trajectories.multi_line("xs", "ys", color="color", source=self.paths, line_alpha=0.45, line_width=1)
        means = self.trajectories.scatter("x", "y", color="color", source=self.means, size=7, line_color="black",
                                          marker="square", legend_field="label")
        self.trajectories.add_tools(HoverTool(renderers=[means], tooltips=[("class", "@label"),
                                                                            ("layer", "@layer")]))
        _legend_beside(self.trajectories, title="class mean")

    def _make_ra2(self, size: int, tools: str) -> None:
        """RA2: the mosaic of alignment scores by block pair, and one pair's matrix."""
        self.mosaic_mapper = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0, nan_color="white")
        self.tiles_image = ColumnDataSource(data={"image": [np.zeros((1, 1), np.float32)], "dw": [1], "dh": [1]})
        self.tiles = ColumnDataSource(data={"x": [], "y": [], "i": [], "j": [], "score": [], "baseline": []})
        self.grid = figure(title="RA2 |U_jᵀ J_i V_j| by block pair", frame_width=size, frame_height=size,
                           x_range=Range1d(0, 1), y_range=Range1d(1, 0), tools="save",
                           x_axis_label="basis of block j", y_axis_label="Jacobian of block i")
        self.grid.image(image="image", x=0, y=0, dw="dw", dh="dh", source=self.tiles_image,
                        color_mapper=self.mosaic_mapper)  # the default anchor: see the module's docstring
        self.grid.add_layout(ColorBar(color_mapper=self.mosaic_mapper, width=8, title="÷ tile max"), "right")
        rects = self.grid.rect("x", "y", width=1, height=1, source=self.tiles, fill_alpha=0.0, line_alpha=0.0)
        self.grid.add_tools(HoverTool(renderers=[rects], tooltips=[
            ("i (Jacobian)", "@i"), ("j (basis)", "@j"), ("alignment score", "@score{0.000}"),
            ("random baseline", "@baseline{0.000}")]))
        self.pair_mapper = LinearColorMapper(palette=RdBu11, low=-1.0, high=1.0)
        self.pair_image = ColumnDataSource(data={"image": [np.zeros((1, 1), np.float32)], "dw": [1], "dh": [1]})
        self.pair_figure = figure(title="pair", frame_width=size, frame_height=size, x_range=Range1d(0, 1),
                                  y_range=Range1d(1, 0), tools="hover,save",
                                  x_axis_label="right singular vector of J_j (V_j)",
                                  y_axis_label="left singular vector of J_j (U_j)",
                                  tooltips=[("value", "@image{0.000}")])
        self.pair_figure.image(image="image", x=0, y=0, dw="dw", dh="dh", source=self.pair_image,
                               color_mapper=self.pair_mapper)
        self.pair_figure.add_layout(ColorBar(color_mapper=self.pair_mapper, width=8), "right")

    def _make_ra3(self, size: int, tools: str) -> None:
        """RA3: the top singular values of every block's Jacobian."""
        self.spectra = ColumnDataSource(data={"xs": [], "ys": [], "color": [], "block": []})
        self.spectrum = figure(title="RA3 top singular values", frame_width=size, frame_height=size,
                               x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools=tools,
                               x_axis_label="index k (dashed: C)", y_axis_label="σ_k")
        lines = self.spectrum.multi_line("xs", "ys", color="color", source=self.spectra, line_width=1.5)
        self.spectrum.add_tools(HoverTool(renderers=[lines], tooltips=[("block", "@block")]))
        self.block_mapper = LinearColorMapper(palette=Viridis256, low=0, high=1)  # the colour of each block's line
        self.spectrum.add_layout(ColorBar(color_mapper=self.block_mapper, width=8, title="block"), "right")
        self.classes_mark = Span(location=0, dimension="height", line_dash="dashed", line_color="black")
        self.spectrum.add_layout(self.classes_mark)

    def _make_ra4(self, size: int, tools: str) -> None:
        """RA4: 1/σ₁ by block with its least-squares line."""
        self.inverse = ColumnDataSource(data={"block": [], "inv": [], "fit": []})
        self.ra4 = figure(title="RA4 1/σ₁ by block", frame_width=size, frame_height=size,
                          x_range=Range1d(0, 1), y_range=Range1d(0, 1), tools=tools, x_axis_label="block i",
                          y_axis_label="1/σ₁")
        self.ra4.scatter("block", "inv", source=self.inverse, size=7, color=BLUE, legend_label="1/σ₁")
        self.ra4.line("block", "fit", source=self.inverse, color=ORANGE, line_width=2, legend_label="least squares")
        _legend_below(self.ra4)

    def _make_nc(self, size: int, tools: str) -> None:
        """Neural collapse by layer."""
        self.collapse_source = ColumnDataSource(data={"layer": [], **{key: [] for key, _, _ in NC_LINES}})
        self.collapse = figure(title="Neural collapse by layer", frame_width=size, frame_height=size,
                               x_range=Range1d(0, 1), y_range=Range1d(1e-3, 1), y_axis_type="log", tools=tools,
                               x_axis_label="layer (0 = stem)", y_axis_label="NC metric (0 = collapsed)")
        for key, name, color in NC_LINES:
            self.collapse.line("layer", key, source=self.collapse_source, color=color, line_width=2,
                               legend_label=name)
            self.collapse.scatter("layer", key, source=self.collapse_source, color=color, size=4)
        _legend_below(self.collapse, ncols=2)

    def set_label(self, label: str) -> None:
        """Name the run these views draw (the column's heading)."""
        self.label = label
        self.heading.object, self.heading.visible = f"### {md(label, one_line=True)}", bool(label)

    # -- drawing ----------------------------------------------------------------------------------------------
    def show(self, snapshot: dict[str, np.ndarray]) -> None:
        """Draw a new snapshot."""
        self.snapshot = snapshot
        with pn.io.unlocked():
            self._trajectories()
            self._grid()
            self._pair()
            self._spectrum()
            self._ra4()
            self._collapse()
        self.summary.object = self.describe()

    def set_projection(self, basis: str) -> None:
        """Trajectories on the top-2 principal directions (``"pca"``) or two random Gaussian ones (``"gauss"``)."""
        self.projection = basis
        if self.snapshot is not None:
            with pn.io.unlocked():
                self._trajectories()

    def set_pair(self, i: int, j: int) -> None:
        """Enlarge the alignment matrix of Jacobian i in the basis of block j (0-based)."""
        self.pair = (i, j)
        if self.snapshot is not None:
            with pn.io.unlocked():
                self._pair()

    def _trajectories(self) -> None:
        f = self.snapshot
        xy, means, labels = f[f"traj_{self.projection}"], f[f"traj_means_{self.projection}"], f["labels"]
        colors = [Category10_10[int(c) % 10] for c in labels]
        self.paths.data = {"xs": [xy[:, n, 0] for n in range(xy.shape[1])],
                           "ys": [xy[:, n, 1] for n in range(xy.shape[1])], "color": colors,
                           "label": [str(int(c)) for c in labels]}
        T, C = means.shape[:2]
        classes = f["class_of_means"]
        self.means.data = {"x": means[:, :, 0].ravel(), "y": means[:, :, 1].ravel(),
                           "color": [Category10_10[int(c) % 10] for _ in range(T) for c in classes],
                           "label": [str(int(c)) for _ in range(T) for c in classes],
                           "layer": [t for t in range(T) for _ in range(C)]}
        plane = "PCA plane" if self.projection == "pca" else "Gaussian plane"
        self.trajectories.title.text = f"RA1 trajectories, {plane}"
        set_range(self.trajectories.x_range, finite_range(xy[..., 0], point=POINT))
        set_range(self.trajectories.y_range, finite_range(xy[..., 1], point=POINT))

    def _grid(self) -> None:
        f = self.snapshot
        grid, scores, baseline = f["grid"][0], f["scores"], f["baseline"]
        L, _, K, _ = grid.shape
        image = mosaic(grid)
        side = L * (K + 1) - 1
        self.tiles_image.data = {"image": [image], "dw": [side / (K + 1)], "dh": [side / (K + 1)]}
        ii, jj = np.meshgrid(np.arange(L), np.arange(L), indexing="ij")
        self.tiles.data = {"x": jj.ravel() + 0.5, "y": ii.ravel() + 0.5, "i": ii.ravel(), "j": jj.ravel(),
                           "score": scores.ravel(), "baseline": np.repeat(baseline, L)}
        self.grid.x_range.update(start=0, end=side / (K + 1))
        self.grid.y_range.update(start=side / (K + 1), end=0)
        centres = [(b * (K + 1) + K / 2) / (K + 1) for b in range(L)]  # one tick per tile, named by its block
        for axis in (self.grid.xaxis, self.grid.yaxis):
            axis.ticker = centres
            axis.major_label_overrides = {c: str(b) for b, c in enumerate(centres)}

    def _pair(self) -> None:
        f = self.snapshot
        grid = f["grid"][0]
        L, _, K, _ = grid.shape
        i, j = min(self.pair[0], L - 1), min(self.pair[1], L - 1)
        tile = grid[i, j]
        scale = float(np.nanmax(np.abs(tile))) if np.isfinite(tile).any() else 1.0
        self.pair_mapper.update(low=-scale, high=scale)
        self.pair_image.data = {"image": [tile.astype(np.float32)], "dw": [K], "dh": [K]}
        self.pair_figure.x_range.update(start=0, end=K)
        self.pair_figure.y_range.update(start=K, end=0)
        score, base = float(f["scores"][i, j]), float(f["baseline"][i])
        self.pair_figure.title.text = f"U_{j}ᵀ J_{i} V_{j}: score {score:.3f} (random {base:.3f})"

    def _spectrum(self) -> None:
        f = self.snapshot
        sigma = f["sigma"]  # [L, K]
        L, K = sigma.shape
        colors = [Viridis256[int(round(255 * b / max(L - 1, 1)))] for b in range(L)]
        self.block_mapper.update(low=0, high=max(L - 1, 1))
        self.spectra.data = {"xs": [np.arange(1, K + 1)] * L, "ys": list(sigma), "color": colors,
                             "block": list(range(L))}
        self.classes_mark.location = float(f["num_classes"]) + 0.5
        self.spectrum.x_range.update(start=0.5, end=K + 0.5)
        set_range(self.spectrum.y_range, finite_range(sigma, floor=0.0, point=POINT))

    def _ra4(self) -> None:
        f = self.snapshot
        inv, fit = f["inv_sigma"], f["inv_sigma_fit"]
        blocks = np.arange(1, len(inv) + 1)
        self.inverse.data = {"block": blocks, "inv": inv, "fit": fit}
        self.ra4.x_range.update(start=0.5, end=len(inv) + 0.5)
        set_range(self.ra4.y_range, finite_range(inv, fit, point=POINT))
        start = int(f["fit_start"]) + 1 if "fit_start" in f else None  # 1-based, as the x axis
        self.ra4.title.text = "RA4 1/σ₁ by block" + (f", fit from block {start}" if start is not None else "")
        slope, r2 = float(f["inv_sigma1_slope"]), float(f["inv_sigma1_r2"])
        self.ra4.legend.items[1].label = value(f"least squares: slope {slope:.3g}, R² {r2:.3f}"
                                               if math.isfinite(slope) else "least squares: no fit")

    def _collapse(self) -> None:
        f = self.snapshot
        n = len(f["nc1"])
        data: dict[str, Any] = {"layer": np.arange(n)}
        positive = []
        for key, _, _ in NC_LINES:
            v = np.asarray(f[key], np.float64)
            v = np.where(np.isfinite(v) & (v > 0), v, np.nan)  # a log axis shows positive values only
            data[key] = v
            positive.append(v)
        self.collapse_source.data = data
        # a factor 1.5 of margin on the log axis; the range stays when no value is positive
        set_range(self.collapse.y_range, finite_range(*positive, pad=0.0, least=math.log10(1.5), log=True, empty=None))
        self.collapse.x_range.update(start=-0.5, end=n - 0.5)

    # -- words ------------------------------------------------------------------------------------------------
    def describe(self) -> str:
        """The snapshot's numbers, each beside what it is compared with, RA2 and its baseline with their 95 %
        intervals over inputs and draws; then, for each number that is n/a, why
        (:func:`~lab.analysis.residual_alignment.alignment_reasons`)."""
        f = self.snapshot
        if f is None:
            return "No snapshot yet: start a run."

        def num(key: str) -> str:
            v = float(f[key])
            return f"{v:.3f}" if math.isfinite(v) else "n/a"

        def interval(key: str) -> str:
            lo, hi = (float(v) for v in np.asarray(f.get(key, (math.nan, math.nan))).reshape(-1)[:2])
            return f" [{lo:.3f}, {hi:.3f}]" if math.isfinite(lo) and math.isfinite(hi) else ""

        line = (f"**Step {int(f['step']) if 'step' in f else 0}.** RA2 alignment (i ≠ j) **{num('align_offdiag')}**"
                f"{interval('align_offdiag_ci')} vs random {num('baseline_mean')}{interval('baseline_ci')} · RA3 "
                f"top-C / next-C σ {num('topk_ratio')} · RA4 slope {num('inv_sigma1_slope')}, R² "
                f"{num('inv_sigma1_r2')} · RA1 straightness {num('straightness')}, spacing CV {num('spacing_cv')}")
        try:
            reasons = alignment_reasons(f)
        except KeyError:  # a snapshot written before the reasons' arrays were kept
            reasons = {}
        said = [f"{REASON_NAMES[key]} n/a: {md(why)}" for key, why in reasons.items() if key in REASON_NAMES]
        return "\n\n".join([line, *said])

    def rows(self, other: AlignmentViews | None = None) -> list[pn.Row]:
        """One row per view: this run's figure, then ``other``'s (a second run drawn beside it)."""
        return [pn.Row(self.panes[name], *([other.panes[name]] if other is not None else [])) for name in VIEWS]

    def points(self) -> dict[str, int]:
        """How many items each view draws (tests: every view shows data)."""
        return {"trajectories": len(self.paths.data["xs"]), "class means": len(self.means.data["x"]),
                "grid tiles": len(self.tiles.data["x"]), "pair": int(np.asarray(self.pair_image.data["image"][0]).size),
                "spectra": len(self.spectra.data["xs"]), "ra4": len(self.inverse.data["block"]),
                "collapse": int(np.isfinite(np.asarray(self.collapse_source.data.get("nc1", []),
                                                       np.float64)).sum())}

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout
