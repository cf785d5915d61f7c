import numpy as np
import pytest

from lab.data import grid
from lab.viz.toy2d import accuracy_curves, decision_map, loss_curves, points


def test_decision_map_puts_each_grid_value_at_its_point():
    g = grid(50).numpy()
    img = decision_map(g[:, 1].reshape(50, 50))  # the value is the point's y coordinate
    assert img[0.0, 0.95] == pytest.approx(0.98, abs=0.03)  # top of the square
    assert img[0.0, -0.95] == pytest.approx(-0.98, abs=0.03)
    img = decision_map(g[:, 0].reshape(50, 50))  # ... and its x coordinate
    assert img[0.95, 0.0] == pytest.approx(0.98, abs=0.03)


def test_points_and_curves():
    x = np.array([[0.1, 0.2], [0.3, -0.4]], np.float32)
    pts = points(x, np.array([0, 1]))
    assert list(pts.dimension_values("class")) == ["0", "1"]
    records = [{"kind": "step", "step": 5, "loss": 0.7},
               {"kind": "eval", "step": 10, "train_loss": 0.5, "train_acc": 0.8, "test_loss": 0.6, "test_acc": 0.7}]
    loss, acc = loss_curves(records), accuracy_curves(records)
    assert len(loss) == 3 and len(acc) == 2
    assert list(acc.get(1).dimension_values("accuracy")) == [0.7]
