"""TFMeter grid: mosaic layout and colours, rasterised weight lines, hover data, narrowing, one Bokeh figure."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import pytest
from bokeh.models import HoverTool, Plot

from lab.viz.node_grid import (
    EMPTY,
    LINE_SATURATION,
    LUT,
    _quantise,
    alpha_bars,
    mosaic,
    node_grid,
    sample_indices,
    similarity_heatmaps,
    weight_matrices,
)
from lab.viz.palette import BLUE, ORANGE

T, G = 10, 2  # tile and gap used throughout: pitch 12 down, 20 across (tile + weights column)


def rgb(h: str) -> tuple[int, int, int]:
    return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)


@pytest.fixture
def snapshot() -> dict:
    """L+1 = 5 layers, H = 4 nodes, R = 50: node k of layer l is (k + 1)(l + 1)·y for even k, ·x for odd k."""
    axis = np.linspace(-1, 1, 50, dtype=np.float32)
    yy, xx = np.meshgrid(axis, axis, indexing="ij")  # rows along y, columns along x
    maps = np.stack([np.stack([(k + 1) * (l + 1) * (yy if k % 2 == 0 else xx) for k in range(4)])
                     for l in range(5)]).astype(np.float32)
    rng = np.random.default_rng(0)
    weights = rng.normal(size=(5, 4, 4)).astype(np.float32)
    weights[0, :, 2:] = 0.0  # the stem reads 2 inputs; zero-padded like layer_weights()
    weights[3, 1, 2] = 0.0  # one exact zero in a block: skipped
    decision = (xx > 0).astype(np.float32)
    return {"maps": maps, "weights": weights, "decision": decision, "limit": np.float32(1.0),
            "alphas": np.ones(4, np.float32), "step": np.int64(7)}


def tile_px(m, col: int, row: int) -> np.ndarray:
    """RGBA ``[T, T, 4]`` of tile (col, row), array row 0 = top of the plot."""
    top, left = row * (m.tile + m.gap), col * (m.tile + m.weight)
    return m.rgba()[top:top + m.tile, left:left + m.tile]


def test_mosaic_size_follows_layout_formula(snapshot):
    m = mosaic(snapshot, tile_px=T, gap_px=G, lines=False)
    rows, cols = 4, 1 + 5  # input column + one per layer
    height = rows * (T + G) - G
    grid_w = cols * T + (cols - 1) * T  # weights columns as wide as tiles
    side = min(rows, 4) * (T + G) - G  # decision tile: 4 rows tall (all of them here)
    assert m.index.shape == (height, grid_w + T + side) == (46, 166)
    assert m.index.dtype == np.uint8 and m.rgba().shape == (46, 166, 4)
    assert m.decision == (grid_w + T, height - side, side)
    # weights columns and gaps are transparent
    assert (m.index[:, T:T + T] == EMPTY).all() and (m.index[T:T + G, :grid_w] == EMPTY).all()
    assert (m.rgba()[m.index == EMPTY][:, 3] == 0).all()


def test_tile_colours_orange_negative_blue_positive(snapshot):
    m = mosaic(snapshot, tile_px=50, gap_px=G)  # one pixel per grid point, so the extremes ±1 are sampled exactly
    # layer 2, node 0 varies along y: top of the tile (y = +1) pure blue, bottom pure orange
    t = tile_px(m, col=1 + 2, row=0)
    assert tuple(t[0, 5, :3]) == rgb(BLUE) and tuple(t[-1, 5, :3]) == rgb(ORANGE)
    # layer 4, node 1 varies along x: left orange, right blue
    t = tile_px(m, col=1 + 4, row=1)
    assert tuple(t[5, 0, :3]) == rgb(ORANGE) and tuple(t[5, -1, :3]) == rgb(BLUE)
    # every pixel's hue follows the sign of the value it samples (blue channel > red ⇔ positive)
    src = snapshot["maps"][3, 3]  # ·x
    m = mosaic(snapshot, tile_px=T, gap_px=G)
    ix = ((np.arange(T) + 0.5) * 50 / T).astype(int)  # nearest-neighbour resampling 50 → T
    vals = src[ix[::-1, None], ix[None, :]]
    t = tile_px(m, col=1 + 3, row=3).astype(int)
    assert ((t[..., 2] > t[..., 0]) == (vals > 0)).all() and ((t[..., 0] > t[..., 2]) == (vals < 0)).all()
    # input column: x tile orange → blue left to right; y tile blue at top; other input rows empty
    assert tuple(tile_px(m, 0, 0)[3, 0, :3]) == rgb(ORANGE) and tuple(tile_px(m, 0, 0)[3, -1, :3]) == rgb(BLUE)
    assert tuple(tile_px(m, 0, 1)[0, 3, :3]) == rgb(BLUE) and tuple(tile_px(m, 0, 1)[-1, 3, :3]) == rgb(ORANGE)
    assert (tile_px(m, 0, 2)[..., 3] == 0).all()


def test_normalize_tile_layer_global(snapshot):
    f = dict(snapshot, maps=snapshot["maps"].copy())
    f["maps"][1, 2] *= 1e-3  # a faint node
    sat = {}
    for mode in ("tile", "layer", "global"):
        t = tile_px(mosaic(f, tile_px=50, gap_px=G, normalize=mode), col=2, row=2)
        sat[mode] = tuple(t[0, 5, :3])
    assert sat["tile"] == rgb(BLUE)  # own range: full colour
    assert sat["layer"] != rgb(BLUE) and sat["global"] != rgb(BLUE)  # scaled by a larger max: near white
    with pytest.raises(ValueError):
        mosaic(f, normalize="column")


def _one_weight_snapshot(snapshot: dict, *entries: tuple[int, int, int, float]) -> dict:
    weights = np.zeros_like(snapshot["weights"])
    for layer, dest, src, w in entries:
        weights[layer, dest, src] = w
    return {**snapshot, "weights": weights}


def test_weight_lines_are_solid_runs_from_source_to_destination_in_sign_colours(snapshot):
    # stem: input y (row 1) → node 3, positive; into layer 2: node 1 of layer 1 → node 0, negative
    m = mosaic(_one_weight_snapshot(snapshot, (0, 3, 1, 2.0), (2, 0, 1, -0.5)), tile_px=T, gap_px=G)
    pitch = T + G
    blue, orange = LUT[_quantise(np.float32(LINE_SATURATION), 1.0)], LUT[_quantise(np.float32(-LINE_SATURATION), 1.0)]
    stem = m.index[:, T:2 * T]  # the weights column between the input column and layer 0
    lit = stem != EMPTY
    # the line starts at the source row's centre and ends at the destination's: rows 1·12+5 = 17 → 3·12+5 = 41
    assert lit[1 * pitch + T // 2, 0] and lit[3 * pitch + T // 2, T - 1]
    assert (LUT[stem[lit]] == blue).all()  # the strongest weight of its column: the lines' full blue
    # solid: every pixel column holds one contiguous run, and consecutive runs touch
    runs = [np.flatnonzero(lit[:, x]) for x in range(T)]
    assert all(len(r) and (np.diff(r) == 1).all() for r in runs)
    assert all(b[0] <= a[-1] + 1 for a, b in zip(runs, runs[1:], strict=False))
    assert lit.sum() == sum(len(r) for r in runs) < 3 * (3 - 1) * pitch  # a thin line, not a filled block
    into2 = m.index[:, 2 * (2 * T) + T:3 * (2 * T)]  # weights column into layer 2 (tile columns 2 → 3)
    assert (LUT[into2[into2 != EMPTY]] == orange).all() and (into2 != EMPTY).any()
    # every other weights column is empty: zero weights draw nothing
    for c in (1, 3, 4):
        assert (m.index[:, c * 2 * T + T:(c + 1) * 2 * T] == EMPTY).all()


def test_crossing_lines_of_opposite_sign_cancel_where_they_overlap(snapshot):
    m = mosaic(_one_weight_snapshot(snapshot, (1, 0, 1, 1.0), (1, 1, 0, -1.0)), tile_px=T, gap_px=G)
    col = m.index[:, 2 * T + T:2 * (2 * T)]  # weights column into layer 1
    mid = (0 * (T + G) + 1 * (T + G)) // 2 + T // 2  # the rows where the two lines cross
    assert abs(int(col[mid, T // 2]) - 127) <= 2  # +1 and −1 sum to white
    # each line keeps its colour where it leaves its source: node 0's weight is −1, node 1's is +1
    assert col[T // 2, 0] == _quantise(np.float32(-LINE_SATURATION), 1.0)
    assert col[(T + G) + T // 2, 0] == _quantise(np.float32(LINE_SATURATION), 1.0)


def test_global_normalize_scales_lines_by_the_largest_weight_shown(snapshot):
    f = _one_weight_snapshot(snapshot, (1, 0, 0, 1.0), (2, 0, 0, 0.25))
    per_column = mosaic(f, tile_px=T, gap_px=G)
    shared = mosaic(f, tile_px=T, gap_px=G, normalize="global")
    small = slice(2 * (2 * T) + T, 3 * (2 * T))  # the column with the 0.25 weight
    assert per_column.index[T // 2, small][0] == _quantise(np.float32(LINE_SATURATION), 1.0)  # its column's largest
    assert 127 < shared.index[T // 2, small][0] < 170  # a quarter of the largest shown: pale blue


def test_layer_and_node_ranges_shrink_the_grid(snapshot):
    m = mosaic(snapshot, layers=(1, 4), nodes=(1, 3), tile_px=T, gap_px=G)
    assert not m.has_input and list(m.layers) == [1, 2, 3] and list(m.nodes) == [1, 2]
    assert m.index.shape == (2 * (T + G) - G, 3 * 2 * T - T + T + 2 * (T + G) - G) == (22, 82)
    # two weights columns (into layers 2 and 3), 2 × 2 each, with the zero at weights[3, 1, 2] among them
    mats = weight_matrices(m, snapshot["weights"])
    assert mats.shape == (2, 2, 2) and np.count_nonzero(mats) == 2 * 2 * 2 - 1
    # layer 2 node 2 (·y) is the tile in column 1, row 1
    t = tile_px(m, col=1, row=1).astype(int)
    assert t[0, 5, 2] > t[0, 5, 0] and t[-1, 5, 0] > t[-1, 5, 2]  # ·y: blue at the top, orange at the bottom
    with pytest.raises(ValueError):
        mosaic(snapshot, layers=(3, 3))
    with pytest.raises(ValueError):
        mosaic(snapshot, nodes=(0, 5))


def test_sampler_picks_evenly_spaced_subset(snapshot):
    assert list(sample_indices(0, 33, 5)) == [0, 8, 16, 24, 32]
    assert list(sample_indices(0, 4, 10)) == [0, 1, 2, 3]
    m = mosaic(snapshot, max_layers=3, max_nodes=2, tile_px=T)
    assert list(m.layers) == [0, 2, 4] and list(m.nodes) == [0, 3] and m.rows == 2
    mats = weight_matrices(m, snapshot["weights"])  # [weights columns, dest row, source row]
    assert mats.shape == (3, 2, 2)  # the stem (from x, y), then into layers 2 and 4, among nodes 0 and 3
    assert np.array_equal(mats[0], snapshot["weights"][0][[0, 3]][:, :2])
    # a weights column shows the weights into its layer, from layer l−1 (not from the previous shown layer)
    assert np.array_equal(mats[1], snapshot["weights"][2][np.ix_([0, 3], [0, 3])])
    assert np.array_equal(mats[2], snapshot["weights"][4][np.ix_([0, 3], [0, 3])])


def test_hover_names_layer_node_and_range(snapshot):
    el = node_grid(snapshot, tile_px=T)
    boxes = el.get(1)
    assert isinstance(boxes, hv.Rectangles)
    layer, node = boxes.dimension_values("layer"), boxes.dimension_values("node")
    lo, hi = boxes.dimension_values("min"), boxes.dimension_values("max")
    assert len(boxes) == 2 + 5 * 4 + 1  # input x, y; every node; the decision tile
    assert (layer[0], node[0], layer[1], node[1]) == ("input", "x", "input", "y")
    i = np.flatnonzero((layer == "3") & (node == "1"))[0]
    assert np.isclose(lo[i], snapshot["maps"][3, 1].min()) and np.isclose(hi[i], snapshot["maps"][3, 1].max())
    assert layer[-1] == "output"
    # boxes sit on their tiles
    m = mosaic(snapshot, tile_px=T)
    assert boxes.dimension_values("x0")[i] == (1 + 3) * 2 * T and boxes.dimension_values("y1")[i] == m.height - 12
    fig = hv.render(el, backend="bokeh")
    tips = [t for tool in fig.tools if isinstance(tool, HoverTool) for t in tool.tooltips]
    assert ("layer", "@{layer}") in tips and ("node", "@{node}") in tips


def test_points_on_decision_tile(snapshot):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (5000, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    el = node_grid(snapshot, points=(x, y), tile_px=T, max_points=200)
    pts = el.get(2)
    m = mosaic(snapshot, tile_px=T)
    dx, dy, side = m.decision
    px, py = pts.dimension_values("x"), pts.dimension_values("y")
    assert len(pts) == 200
    assert (px >= dx).all() and (px <= dx + side).all() and (py >= dy).all() and (py <= dy + side).all()
    # the decision map (1 where x > 0) is blue on the tile's right half, lighter than a node tile
    tile = m.rgba()[0:side, dx:dx + side].astype(int)
    assert tile[5, -2, 2] > tile[5, -2, 0] and tile[5, 1, 0] > tile[5, 1, 2]


def test_rgba_encoding_matches_index(snapshot):
    el = node_grid(snapshot, tile_px=T, encoding="rgba")
    assert isinstance(el.get(0), hv.RGB)
    assert isinstance(node_grid(snapshot, tile_px=T).get(0), hv.Image)


def test_full_32x32_snapshot_is_one_bokeh_figure():
    import lab
    from lab.analysis.node_maps import node_maps

    f = node_maps(lab.create_model("residual_mlp", seed=0)).as_arrays()
    assert f["maps"].shape == (33, 32, 50, 50)
    el = node_grid(f, points=(np.zeros((10, 2), np.float32), np.arange(10) % 2))
    assert len(el.get(1)) == 2 + 33 * 32 + 1  # hover boxes: inputs, every tile, the decision tile
    fig = hv.render(el, backend="bokeh")
    plots = [m for m in fig.references() if isinstance(m, Plot)]
    assert len(plots) == 1 and plots[0] is fig
    assert len(fig.renderers) == 3  # mosaic (tiles and weight lines), hover boxes, points


def test_alpha_bars_and_similarity_heatmaps():
    bars = alpha_bars(np.array([1.0, 0.75, 0.5], np.float32))
    assert isinstance(bars, hv.Histogram)
    assert np.allclose(bars.edges, [0.5, 1.5, 2.5, 3.5])  # bar l centred on layer l = 1..L
    assert np.allclose(bars.dimension_values("alpha"), [1.0, 0.75, 0.5])
    dist = np.arange(9, dtype=np.float32).reshape(3, 3)
    cka = np.eye(3, dtype=np.float32)
    lay = similarity_heatmaps(dist, cka)
    assert isinstance(lay, hv.Layout) and [e.label for e in lay] == ["Euclidean distance", "linear CKA"]
    d = lay.values()[0]
    assert d[2, 0] == dist[0, 2] and d[0, 2] == dist[2, 0]  # cell (x = j, y = i) holds values[i, j]
    assert d.kdims[0].label == "layer" and d.kdims[1].label == "layer"
    hv.render(lay, backend="bokeh")
