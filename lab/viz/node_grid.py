"""The TFMeter grid of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections* as ONE plot: every
node's output over the input plane, and the weights between layers.

Layout, left to right (H rows × (2N+1) columns, §3.1 of that paper): the input column (x and y as tiles in rows 0
and 1), then per shown layer a weights column (lines from the previous column's nodes; colour = sign, blue
positive, orange negative; strength ∝ ``|w|``) and a node-output column (each node's ``[R, R]`` map, Playground's
orange/white/blue, white at 0). The training points go on a separate, larger decision tile right of the last
column, not on every last-layer tile: 32 tiles × a few hundred dots would hide the maps they sit on, while the
decision map is what the points are judged against (as in the Playground's output panel).

Everything is one Bokeh figure with three glyphs: the mosaic (one image of all tiles *and* all weight lines,
encoded as uint8 palette indices, or RGBA), one invisible ``hv.Rectangles`` carrying the hover data, and the points.
The lines are rasterised into the image on the server (:func:`draw_weights`): 32 × 32 nodes over 32 layers are
about 33,000 lines, which a browser strokes one by one in hundreds of milliseconds, while as pixels they cost
nothing extra to send or draw. Plot coordinates are mosaic pixels, origin bottom-left; row 0 (node 0) is at the top.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import holoviews as hv
import numpy as np
from scipy import sparse

from lab.viz.palette import BLUE, ORANGE, diverging

hv.util.extension("bokeh")  # the Bokeh backend only: a notebook loads BokehJS with lab.ui.extension()

EMPTY = 255  # palette index of a transparent pixel (gaps, weight columns, unused rows)
PALETTE = diverging(255)  # index 0 = orange (−1), 127 = white (0), 254 = blue (+1)
LUT = np.zeros((256, 4), np.uint8)  # palette index → RGBA; LUT[EMPTY] is transparent
LUT[:255, :3] = [[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in PALETTE]
LUT[:255, 3] = 255
DECISION_SATURATION = 0.6  # the decision tile is drawn lighter than the nodes (as the Playground's output)
FIT_PX = (1040, 900)  # the default tile size keeps the mosaic within about this width × height: it fits
# the main area of the served page (1,500 px wide, less the sidebar) without scrolling


@dataclass(frozen=True)
class Mosaic:
    """All tiles of one snapshot as a single image plus the geometry to place lines, points and hover boxes.

    Attributes:
        index: ``[H_px, W_px]`` uint8 palette indices (see :data:`PALETTE`; :data:`EMPTY` = transparent); array
            row 0 is the top of the plot.
        layers: ``[C_l]`` shown indices into the snapshot's first axis (0 = stem).
        nodes: ``[C_n]`` shown node indices.
        has_input: whether the input column (x, y) comes first (only when layer 0 is shown).
        tile, gap, weight: tile side, gap between rows, width of a weights column (pixels).
        rows: number of tile rows (``max(C_n, 2)`` with the input column, else ``C_n``).
        decision: ``(x0, y0, side)`` of the decision tile, or None.
        tile_min, tile_max: ``[C_l, C_n]`` raw value range of each node map.
    """

    index: np.ndarray
    layers: np.ndarray
    nodes: np.ndarray
    has_input: bool
    tile: int
    gap: int
    weight: int
    rows: int
    decision: tuple[int, int, int] | None
    tile_min: np.ndarray
    tile_max: np.ndarray

    @property
    def height(self) -> int:
        return self.index.shape[0]

    @property
    def width(self) -> int:
        return self.index.shape[1]

    @property
    def columns(self) -> int:
        """Tile columns: the input column (if any) plus one per shown layer."""
        return len(self.layers) + int(self.has_input)

    def column_x(self, col: np.ndarray | int) -> np.ndarray | int:
        """Left edge of tile column ``col``."""
        return col * (self.tile + self.weight)

    def row_y(self, row: np.ndarray | int) -> np.ndarray | int:
        """Bottom edge of tile row ``row`` (row 0 at the top)."""
        return self.height - row * (self.tile + self.gap) - self.tile

    def rgba(self) -> np.ndarray:
        """``[H_px, W_px, 4]`` uint8 RGBA of the mosaic (gaps transparent)."""
        return LUT[self.index]


def sample_indices(start: int, stop: int, max_n: int | None = None) -> np.ndarray:
    """Indices ``start..stop-1``, or an evenly spaced subset of at most ``max_n`` keeping both ends."""
    if stop <= start:
        raise ValueError(f"empty range [{start}, {stop})")
    if max_n is None or max_n >= stop - start:
        return np.arange(start, stop)
    if max_n < 1:
        raise ValueError(f"max_n must be >= 1; got {max_n}")
    return np.unique(np.rint(np.linspace(start, stop - 1, max_n)).astype(np.int64))


def _quantise(values: np.ndarray, scale: np.ndarray | float) -> np.ndarray:
    """Palette indices of ``values / scale`` in [−1, 1] (0 → white, sign → orange/blue)."""
    return np.rint((np.clip(values / scale, -1.0, 1.0) + 1.0) * 127.0).astype(np.uint8)


def _resample_idx(src: int, dst: int) -> np.ndarray:
    """Nearest-neighbour source index of each of ``dst`` output pixels along one axis."""
    return ((np.arange(dst) + 0.5) * src / dst).astype(np.int64).clip(0, src - 1)


def _take(a: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """``a`` indexed by ``idx`` along ``axis``: a view when ``idx`` is a contiguous range (no 10 MB copy)."""
    if len(idx) and idx[-1] - idx[0] == len(idx) - 1:
        return a[(slice(None),) * axis + (slice(int(idx[0]), int(idx[-1]) + 1),)]
    return np.take(a, idx, axis=axis)


def decision_pixels(decision: np.ndarray, side: int) -> np.ndarray:
    """``[side, side]`` uint8 palette indices of ``decision [R, R]`` (probability of class 1, grid order: row 0 at
    the bottom), row 0 at the top, resampled nearest-neighbour and drawn lighter than the nodes
    (:data:`DECISION_SATURATION`) so the training points over it stand out: the grid's decision tile and the
    Playground's decision map."""
    p = np.asarray(decision, np.float32)
    dx = _resample_idx(p.shape[-1], side)
    return _quantise((p[dx[::-1, None], dx[None, :]] * 2.0 - 1.0) * DECISION_SATURATION, 1.0)


def _range(span: tuple[int, int] | None, n: int, name: str) -> tuple[int, int]:
    a, b = (0, n) if span is None else span
    if not 0 <= a < b <= n:
        raise ValueError(f"{name} {span} out of range for {n}")
    return a, b


def mosaic(snapshot: dict, *, layers: tuple[int, int] | None = None, nodes: tuple[int, int] | None = None,
           max_layers: int | None = None, max_nodes: int | None = None, tile_px: int | None = None,
           gap_px: int = 2, weight_px: int | None = None, normalize: str = "tile", lines: bool = True,
           fit_width: int = FIT_PX[0]) -> Mosaic:
    """Build the tile mosaic of a nodes snapshot with vectorised numpy (no loop over tiles).

    Args:
        snapshot: a nodes snapshot: ``maps [L+1, H, R, R]`` (rows along y), ``limit`` and optionally
            ``weights [L+1, H, H_in]`` and ``decision [R, R]`` (probability of class 1).
        layers, nodes: inclusive-exclusive ranges into maps' first and second axes (default: all).
        max_layers, max_nodes: show at most this many, evenly spaced (both ends kept).
        tile_px: side of a node tile in pixels (maps are resampled nearest-neighbour from R); default: the
            largest up to R that keeps the mosaic within about ``fit_width`` × 900 pixels (13 for 33 layers × 32
            nodes at the default 1040; at least 8).
        gap_px: vertical gap between tiles.
        weight_px: width of a weights column (default ``tile_px``).
        normalize: colour range of a node map: ``"tile"`` (its own max ``|v|``), ``"layer"`` (max ``|v|`` over the
            shown nodes of its layer) or ``"global"`` (over all shown tiles). Always symmetric so white = 0.
        lines: draw the snapshot's weights as lines in the weights columns (:func:`draw_weights`).
        fit_width: the width in pixels the default tile size fits the mosaic into.
    """
    if normalize not in ("tile", "layer", "global"):
        raise ValueError(f"normalize must be 'tile', 'layer' or 'global'; got {normalize!r}")
    maps = np.asarray(snapshot["maps"], np.float32)
    lay = sample_indices(*_range(layers, maps.shape[0], "layers"), max_layers)
    nod = sample_indices(*_range(nodes, maps.shape[1], "nodes"), max_nodes)
    has_input = bool(lay[0] == 0)
    rows = max(len(nod), 2) if has_input else len(nod)
    cols = len(lay) + int(has_input)
    dec_rows = min(rows, max(4, rows // 4)) if snapshot.get("decision") is not None else 0
    r = maps.shape[-1]
    g = int(gap_px)
    if tile_px is None:  # width ≈ (2·cols − 1 + dec_rows + 1)·t when weight_px = t
        tile_px = max(8, min(r, fit_width // (2 * cols + dec_rows), FIT_PX[1] // rows - g))
    t = int(tile_px)
    w = t if weight_px is None else int(weight_px)

    sub = _take(_take(maps, lay, 0), nod, 1)  # [C_l, C_n, R, R]
    flat = sub.reshape(*sub.shape[:2], -1)
    lo, hi = flat.min(axis=-1), flat.max(axis=-1)
    scale = np.maximum(np.abs(lo), np.abs(hi))
    if normalize == "layer":
        scale = np.broadcast_to(scale.max(axis=1, keepdims=True), scale.shape)
    elif normalize == "global":
        scale = np.full_like(scale, scale.max())
    scale = np.where(scale > 0, scale, 1.0)[..., None, None]
    ix = _resample_idx(r, t)
    small = sub[:, :, ix[::-1, None], ix[None, :]]  # [C_l, C_n, t, t], flipped so +y is up
    tiles = np.full((cols, rows, t + g, t + w), EMPTY, np.uint8)
    tiles[int(has_input):, :len(nod), :t, :t] = _quantise(small, scale)
    if has_input:
        ramp = _quantise(np.linspace(-1.0, 1.0, t, dtype=np.float32), 1.0)
        tiles[0, 0, :t, :t] = ramp[None, :]  # x: orange left, blue right
        tiles[0, 1, :t, :t] = ramp[::-1, None]  # y: blue top, orange bottom
    height = rows * (t + g) - g
    grid_w = cols * (t + w) - w
    block = tiles.transpose(1, 2, 0, 3).reshape(rows * (t + g), cols * (t + w))[:height, :grid_w]

    decision = None
    if dec_rows:
        side = dec_rows * (t + g) - g
        index = np.full((height, grid_w + w + side), EMPTY, np.uint8)
        index[:side, grid_w + w:] = decision_pixels(snapshot["decision"], side)
        decision = (grid_w + w, height - side, side)
    else:
        index = np.full((height, grid_w), EMPTY, np.uint8)
    index[:, :grid_w] = block
    m = Mosaic(index, lay, nod, has_input, t, g, w, rows, decision, lo, hi)
    if lines and "weights" in snapshot:
        draw_weights(m, snapshot["weights"], "global" if normalize == "global" else "tile")
    return m


def weight_matrices(m: Mosaic, weights: np.ndarray) -> np.ndarray:
    """``[C-1, rows, rows]``: per weights column, the weight into dest row k from source row j (zero = no line).

    ``weights [L+1, H, H_in]``: ``weights[l][k, j]`` feeds node k of layer l from node j of the layer before (for
    the stem, j indexes the input column's x and y). A weights column always shows the weights into its layer
    (from layer l−1), also when the previous shown layer is further back.
    """
    n, inp = len(m.nodes), int(m.has_input)
    mats = np.zeros((max(m.columns - 1, 0), m.rows, m.rows), np.float32)
    if inp:
        mats[:1, :n, :2] = weights[0][m.nodes][:, :2]  # the stem reads the two input coordinates
    into = m.layers[1:]  # layers whose incoming weights come from a shown column
    if len(into):
        mats[inp:, :n, :n] = weights[np.ix_(into, m.nodes, m.nodes)]
    return mats


LINE_FLOOR = 0.15  # weights below this share of their column's largest are not drawn (a grey haze otherwise)
LINE_SATURATION = 0.7  # lines are drawn lighter than the tiles, so the tiles stay the figure's subject


@functools.lru_cache(maxsize=8)
def _line_runs(columns: int, rows: int, tile: int, gap: int, weight: int, height: int) -> sparse.csr_matrix:
    """The geometry of every possible line, as a sparse ``[(height + 1) · columns · weight, columns · rows²]``
    difference operator: line (c, k, j) adds +1 where its run of rows starts and −1 just past where it ends, in
    each pixel column it crosses. Depends only on the layout, so it is built once per layout and reused.
    """
    pitch = tile + gap
    c, k, j = (a.ravel() for a in np.meshgrid(np.arange(columns), np.arange(rows), np.arange(rows), indexing="ij"))
    a = j * pitch + tile / 2.0  # array rows (0 = top) of the line's two ends: source j, destination k
    b = k * pitch + tile / 2.0
    px = np.arange(weight)
    y0 = a[:, None] + (b - a)[:, None] * (px / weight)  # [lines, weight]: heights at each pixel column's edges
    y1 = a[:, None] + (b - a)[:, None] * ((px + 1) / weight)
    lo = np.clip(np.floor(np.minimum(y0, y1)), 0, height - 1).astype(np.int64)
    hi = np.clip(np.floor(np.maximum(y0, y1)), 0, height - 1).astype(np.int64) + 1
    cols = columns * weight
    xcol = c[:, None] * weight + px[None, :]
    line = np.broadcast_to(np.arange(len(c))[:, None], lo.shape)
    rows_idx = np.concatenate([(lo * cols + xcol).ravel(), (hi * cols + xcol).ravel()])
    ones = np.ones(lo.size, np.float32)
    return sparse.csr_matrix((np.concatenate([ones, -ones]), (rows_idx, np.concatenate([line.ravel()] * 2))),
                             shape=((height + 1) * cols, len(c)))


def draw_weights(m: Mosaic, weights: np.ndarray, normalize: str = "tile") -> None:
    """Rasterise every weight as a line into the weights columns of ``m.index`` (in place).

    A line runs from the right edge of its source tile's row centre to the left edge of its destination's. In each
    pixel column it covers the run of rows between its heights at the column's two edges, so steep lines stay
    solid. Where lines overlap their normalised weights add: a pixel's value is ``Σw / max(Σ|w|, 1)``, so one
    line shows its own strength and sign, and a bundle saturates to the sign of its majority (drawn at
    :data:`LINE_SATURATION`). Weights are
    normalised by the largest ``|w|`` of their column (of all columns for ``normalize="global"``), so small branch
    weights stay visible next to the stem's; those under :data:`LINE_FLOOR` of it, and zeros, draw nothing.

    Args:
        m: the mosaic to draw on.
        weights: ``[L+1, H, H_in]`` as in :func:`node_grid`.
        normalize: ``"global"`` scales by the largest ``|w|`` shown; otherwise per weights column.
    """
    mats = weight_matrices(m, np.asarray(weights, np.float32))
    if not mats.size:
        return
    col_max = np.abs(mats).max(axis=(1, 2))
    top = np.full_like(col_max, col_max.max()) if normalize == "global" else col_max
    w = mats / np.maximum(top, 1e-12)[:, None, None]
    w[np.abs(w) < LINE_FLOOR] = 0.0
    ncol, wpx, height = len(col_max), m.weight, m.height
    runs = _line_runs(ncol, m.rows, m.tile, m.gap, wpx, height)
    flat = w.ravel()
    # a cumulative sum down each pixel column turns run starts and ends into filled runs
    total = (runs @ flat).reshape(height + 1, ncol * wpx).cumsum(0)[:-1]
    cover = (runs @ np.abs(flat)).reshape(height + 1, ncol * wpx).cumsum(0)[:-1]
    value = (total / np.maximum(cover, 1.0)).astype(np.float32)
    raster = np.where(cover > 1e-6, _quantise(value * LINE_SATURATION, 1.0), EMPTY).astype(np.uint8)
    for col in range(ncol):
        x0 = int(m.column_x(col)) + m.tile
        m.index[:, x0:x0 + wpx] = raster[:, col * wpx:(col + 1) * wpx]


def hover_boxes(m: Mosaic, limit: float = 1.0, decision: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """One box (x0, y0, x1, y1) per shown tile: layer and node as strings, raw value range min and max.

    Input tiles are layer "input", nodes "x" and "y"; with ``decision [R, R]`` the decision tile is "output".
    """
    cl, cn = np.meshgrid(np.arange(len(m.layers)), np.arange(len(m.nodes)), indexing="ij")
    col, row = (cl + int(m.has_input)).ravel(), cn.ravel()
    layer = m.layers[cl].ravel().astype(str).astype(object)
    node = m.nodes[cn].ravel().astype(str).astype(object)
    lo, hi = m.tile_min.ravel(), m.tile_max.ravel()
    x0, y0 = m.column_x(col), m.row_y(row)
    x1, y1 = x0 + m.tile, y0 + m.tile
    if m.has_input:
        x0, y0 = np.r_[[0, 0], x0], np.r_[m.row_y(np.arange(2)), y0]
        x1, y1 = np.r_[[m.tile] * 2, x1], np.r_[y0[:2] + m.tile, y1]
        layer, node = np.r_[["input"] * 2, layer], np.r_[["x", "y"], node]
        lo, hi = np.r_[[-limit] * 2, lo], np.r_[[limit] * 2, hi]
    if m.decision is not None and decision is not None:
        dx, dy, side = m.decision
        x0, y0, x1, y1 = np.r_[x0, dx], np.r_[y0, dy], np.r_[x1, dx + side], np.r_[y1, dy + side]
        layer, node = np.r_[layer, ["output"]], np.r_[node, ["p(class 1)"]]
        lo, hi = np.r_[lo, decision.min()], np.r_[hi, decision.max()]
    return {"x0": x0, "y0": y0, "x1": x1, "y1": y1, "layer": layer, "node": node,
            "min": np.asarray(lo, np.float32), "max": np.asarray(hi, np.float32)}


def point_marks(square: tuple[float, float, float], points: tuple[np.ndarray, np.ndarray], limit: float,
                max_points: int) -> dict[str, np.ndarray]:
    """Training points ``(x [n, 2], y [n])`` mapped onto ``square`` = (left, bottom, side) in plot coordinates
    (origin bottom-left; the mosaic's decision tile is :attr:`Mosaic.decision`), evenly subsampled to
    ``max_points``; those outside ``±limit`` are left out. Returns ``x``, ``y`` and ``class`` (int8)."""
    x, y = np.asarray(points[0], np.float32), np.asarray(points[1])
    keep = sample_indices(0, len(x), max_points) if len(x) else np.zeros(0, np.int64)
    x, y = x[keep], y[keep]
    inside = (np.abs(x) <= limit).all(axis=1)
    dx, dy, side = square
    px = dx + (x[inside, 0] + limit) / (2 * limit) * side
    py = dy + (x[inside, 1] + limit) / (2 * limit) * side
    return {"x": px, "y": py, "class": y[inside].astype(np.int8)}


def _points(m: Mosaic, points: tuple[np.ndarray, np.ndarray], limit: float, max_points: int) -> hv.Points:
    """Training points on the decision tile (:func:`point_marks`) as dots coloured by class."""
    return hv.Points(point_marks(m.decision, points, limit, max_points), kdims=["x", "y"], vdims=["class"]).opts(
        color="class", cmap=[ORANGE, BLUE], clim=(0, 1), size=3, line_color="white", line_width=0.4)


def node_grid(snapshot: dict, *, layers: tuple[int, int] | None = None, nodes: tuple[int, int] | None = None,
              points: tuple[np.ndarray, np.ndarray] | None = None, tile_px: int | None = None,
              normalize: str = "tile", max_layers: int | None = None, max_nodes: int | None = None,
              max_points: int = 300, encoding: str = "index", frame_width: int | None = None,
              fit_width: int = FIT_PX[0]) -> hv.Overlay:
    """The TFMeter figure for one nodes snapshot, drawn as a single plot (one Bokeh figure).

    Args:
        snapshot: a nodes snapshot (:func:`lab.snapshots.builders.nodes_snapshot`): ``maps [L+1, H, R, R]``,
            ``weights [L+1, H, H_in]`` (the stem's ``[H, in_dim]`` zero-padded, then each block's branch input
            weights), optionally ``decision [R, R]``, ``limit`` and ``step``.
        layers, nodes: inclusive-exclusive ranges into maps' first and second axes. The input column is drawn
            only when layer 0 (the stem) is shown; the first shown layer then gets no incoming weights column.
        points: training ``(x [n, 2], y [n])``, drawn on the decision tile, evenly subsampled to ``max_points``.
        tile_px: pixels per node tile (the mosaic's resolution; default: see :func:`mosaic`). The figure
            shows one screen pixel per mosaic pixel unless ``frame_width`` scales it.
        normalize: node colour range per ``"tile"``, ``"layer"`` or ``"global"``; line strengths are
            normalised per weights column, or over all columns for ``"global"``.
        max_layers, max_nodes: evenly spaced subset for large L, H. A weights column always shows the weights
            into its layer (from layer l−1), also when the previous shown layer is further back.
        encoding: ``"index"`` sends the mosaic as a uint8 image with a 255-colour palette (1 byte per pixel);
            ``"rgba"`` sends it as an ``hv.RGB`` (4 bytes per pixel). Both look the same.
        frame_width: width of the plot area in screen pixels (default: one per mosaic pixel).
        fit_width: the width the default tile size fits the mosaic into (:func:`mosaic`).

    Returns:
        Overlay of the mosaic (tiles and weight lines), an invisible ``hv.Rectangles`` hover layer (vdims
        layer, node, min, max) and, with ``points``, an ``hv.Points`` of the training set.
    """
    m = mosaic(snapshot, layers=layers, nodes=nodes, max_layers=max_layers, max_nodes=max_nodes, tile_px=tile_px,
               normalize=normalize, fit_width=fit_width)
    limit = float(snapshot.get("limit", 1.0))
    bounds = (0, 0, m.width, m.height)
    if encoding == "index":
        image = hv.Image(m.index, bounds=bounds, kdims=["x", "y"], vdims=["palette index"]).opts(
            cmap=PALETTE, clim=(-0.5, 254.5), clipping_colors={"max": "transparent"})
    elif encoding == "rgba":
        image = hv.RGB(m.rgba(), bounds=bounds, kdims=["x", "y"], vdims=["R", "G", "B", "A"])
    else:
        raise ValueError(f"encoding must be 'index' or 'rgba'; got {encoding!r}")
    decision = snapshot.get("decision")
    hover = hv.Rectangles(hover_boxes(m, limit, None if decision is None else np.asarray(decision)),
                          kdims=["x0", "y0", "x1", "y1"], vdims=["layer", "node", "min", "max"]).opts(
        fill_alpha=0, line_alpha=0, hover_fill_alpha=0, hover_line_color="black", hover_line_alpha=1,
        tools=["hover"], hover_tooltips=[("layer", "@layer"), ("node", "@node"), ("min", "@min{0.000}"),
                                         ("max", "@max{0.000}")])
    parts = [image, hover]
    if points is not None and m.decision is not None:
        parts.append(_points(m, points, limit, max_points))

    xt = [(int(m.column_x(c)) + m.tile / 2, str(lbl)) for c, lbl in
          enumerate((["in"] if m.has_input else []) + [str(v) for v in m.layers])]
    if m.decision is not None:
        xt.append((m.decision[0] + m.decision[2] / 2, "out"))
    yt = [(float(m.row_y(r)) + m.tile / 2, str(n)) for r, n in enumerate(m.nodes)]
    fw = m.width if frame_width is None else int(frame_width)
    step = snapshot.get("step")
    return hv.Overlay(parts).opts(
        frame_width=fw, frame_height=max(1, round(fw * m.height / m.width)), xlim=(0, m.width),
        ylim=(0, m.height), xticks=xt, yticks=yt, xlabel="layer (0 = stem)", ylabel="node", show_grid=False,
        title="" if step is None else f"step {int(step)}", toolbar="above", bgcolor="white")


def alpha_bars(alphas: np.ndarray) -> hv.Histogram:
    """``alphas [L]``: the shortcut scale α of each block, as bars at layer index l = 1..L (block l−1's output).

    A histogram on a numeric axis rather than categorical ``hv.Bars``: when the depth changes live, a categorical
    axis has its factors and its data replaced in two steps, which the browser reports as a size mismatch.
    """
    a = np.asarray(alphas, np.float32).ravel()
    edges = np.arange(len(a) + 1, dtype=np.float32) + 0.5
    top = max(1.0, float(a.max()) if len(a) else 1.0)
    return hv.Histogram((edges, a), kdims=[hv.Dimension("layer")], vdims=[hv.Dimension("alpha", label="α")]).opts(
        color=BLUE, line_color="white", ylim=(0, top * 1.05), xlim=(0.5, len(a) + 0.5), title="α per block",
        tools=["hover"], width=360, height=200, framewise=True)


def _layer_image(values: np.ndarray, label: str, clim: tuple[float | None, float | None]) -> hv.Image:
    """``values [L+1, L+1]`` as an image where cell (x = j, y = i) holds ``values[i, j]``; layer 0 at the top."""
    v = np.asarray(values, np.float32)
    n = v.shape[0]
    xdim, ydim = hv.Dimension("j", label="layer"), hv.Dimension("i", label="layer")
    return hv.Image(v[::-1], bounds=(-0.5, -0.5, n - 0.5, n - 0.5), kdims=[xdim, ydim],
                    vdims=[hv.Dimension("value", label=label)], label=label).opts(
        cmap="viridis", clim=clim, colorbar=True, invert_yaxis=True, title=label, tools=["hover"],
        frame_width=260, frame_height=260, framewise=True)


def distance_heatmap(distance: np.ndarray) -> hv.Image:
    """Fig. 3 of the ResidualDroppath paper: Euclidean distance between every pair of layers' grid features,
    ``distance [L+1, L+1]``; both axes are the layer index into the node maps' first axis (0 = stem output)."""
    return _layer_image(distance, "Euclidean distance", (0.0, np.nan))


def cka_heatmap(cka: np.ndarray) -> hv.Image:
    """Linear CKA between every pair of layers, ``cka [L+1, L+1]``: the distance map's scale-free companion."""
    return _layer_image(cka, "linear CKA", (0.0, 1.0))


def similarity_heatmaps(distance: np.ndarray, cka: np.ndarray) -> hv.Layout:
    """:func:`distance_heatmap` and :func:`cka_heatmap` side by side."""
    return (distance_heatmap(distance) + cka_heatmap(cka)).opts(shared_axes=False)
