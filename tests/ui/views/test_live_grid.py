"""The live node grid: what its canvas is sent per layout and per snapshot, in the mosaic's own coordinates."""

from __future__ import annotations

import numpy as np

from lab.ui.views.live_grid import LiveDecision, LiveGrid
from lab.viz.node_grid import EMPTY, decision_pixels, hover_boxes, mosaic


def snapshot(step: int, seed: int = 0, layers: int = 4, nodes: int = 3, r: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"maps": rng.standard_normal((layers, nodes, r, r)).astype(np.float32),
            "weights": rng.standard_normal((layers, nodes, nodes)).astype(np.float32),
            "decision": rng.uniform(size=(r, r)).astype(np.float32), "limit": np.float32(2.0),
            "step": np.int64(step)}


def test_a_frame_sends_the_mosaic_its_ranges_and_title_and_the_layout_only_when_it_changes():
    grid, rng = LiveGrid(max_points=50), np.random.default_rng(1)
    points = (rng.uniform(-3, 3, (200, 2)).astype(np.float32), rng.integers(0, 2, 200))
    view = {"layers": (0, 4), "nodes": (0, 3), "normalize": "tile", "points": points}
    first = snapshot(10)
    grid.show(first, **view)
    canvas, m = grid.pane, mosaic(first, layers=(0, 4), nodes=(0, 3))
    assert np.array_equal(canvas.pixels, m.index) and canvas.title == "step 10" and grid.layouts == 1
    box = hover_boxes(m, 2.0, first["decision"])
    assert np.array_equal(canvas.ranges, np.stack([box["min"], box["max"]], axis=1))
    boxes = canvas.layout["boxes"]
    assert len(boxes) == len(canvas.ranges) == 2 + 4 * 3 + 1  # the input's x and y, every tile, the decision
    # each box covers exactly its tile, rows counted down from the top: inside it every pixel is painted, and the
    # pixel rows just above and below are the transparent gaps between tiles (or the mosaic's edge)
    for x0, y0, x1, y1, layer, node in boxes:
        assert (canvas.pixels[y0:y1, x0:x1] != EMPTY).all(), (layer, node)
        for row in (y0 - 1, y1):
            if 0 <= row < m.height and layer != "output":
                assert (canvas.pixels[row, x0:x1] == EMPTY).all(), (layer, node, row)
    assert boxes[2][4:] == ["0", "0"] and boxes[-1][4:] == ["output", "p(class 1)"]
    dx, dy, side = m.decision  # the points sit on the decision tile, y down from the top
    top = m.height - dy - side
    dots = np.array(canvas.layout["points"])
    assert 0 < len(dots) <= 50 and set(dots[:, 2]) <= {0, 1}
    assert ((dots[:, 0] >= dx) & (dots[:, 0] <= dx + side) & (dots[:, 1] >= top) & (dots[:, 1] <= top + side)).all()
    assert [label for _, label in canvas.layout["columns"]] == ["in", "0", "1", "2", "3", "out"]

    layout = canvas.layout
    second = snapshot(20, seed=2)
    grid.show(second, **view)  # the next snapshot of the same view: new pixels, ranges and title only
    assert grid.layouts == 1 and canvas.layout is layout and canvas.title == "step 20"
    assert np.array_equal(canvas.pixels, mosaic(second, layers=(0, 4), nodes=(0, 3)).index)
    grid.show(second, **{**view, "nodes": (1, 3)})  # another view: a new layout
    assert grid.layouts == 2 and canvas.pixels.shape[0] < m.height
    assert [label for _, label in canvas.layout["rows"]] == ["1", "2"]


def test_the_decision_map_sends_its_pixels_with_the_top_row_first_and_its_points_once_per_data_set():
    decision = LiveDecision(size=40, max_points=10)
    p = np.full((8, 8), 0.5, np.float32)
    p[-1, 0], p[0, 0] = 1.0, 0.0  # grid order: the last row is the top (y = +limit), the first the bottom
    x = np.array([[-1.5, 1.5], [1.0, -1.0], [3.0, 0.0]], np.float32)  # the third lies outside ±limit
    y = np.array([1, 0, 1])
    decision.show(p, 7, x, y, limit=2.0)
    canvas = decision.pane
    assert canvas.title == "Decision boundary at step 7" and canvas.pixels.shape == (40, 40)
    assert canvas.pixels[0, 0] == decision_pixels(np.ones((1, 1)), 1)[0, 0] != canvas.pixels[-1, 0]
    assert canvas.pixels[-1, 0] == decision_pixels(np.zeros((1, 1)), 1)[0, 0]
    assert canvas.ranges.tolist() == [[0.0, 1.0]]
    layout = canvas.layout
    assert layout["points"] == [[5.0, 5.0, 1], [30.0, 30.0, 0]]  # (x, y) in pixels, y down from the top
    assert layout["columns"] == [[10.0, "-1"], [20.0, "0"], [30.0, "1"]]
    assert layout["rows"][-1] == [10.0, "1"] and layout["boxes"] == [[0, 0, 40, 40, "output", "p(class 1)"]]
    decision.show(np.flipud(p), 8, x, y, limit=2.0)  # the next snapshot: new pixels and title, the same layout
    assert canvas.layout is layout and canvas.title == "Decision boundary at step 8"
    assert canvas.pixels[0, 0] == decision_pixels(np.zeros((1, 1)), 1)[0, 0]
