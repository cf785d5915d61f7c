import numpy as np
import pytest
import torch

from lab.config import DataConfig
from lab.data import TOY_DATASETS, grid, grid_axis, make_points, make_toy_data, spiral, train_test_split


def test_spiral_geometry_matches_the_residual_droppath_paper():
    x, y = spiral(16384, seed=3)
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.shape == (16384, 2)
    assert (y == 0).sum() == (y == 1).sum() == 8192
    x0, x1 = x[y == 0].double(), x[y == 1].double()
    # class 0 at (r sin a, r cos a): angle measured from the y axis, r = a / 2π
    a = torch.atan2(x0[:, 0], x0[:, 1]) % (2 * np.pi)
    r = x0.norm(dim=1)
    assert torch.allclose(r, a / (2 * np.pi), atol=1e-5)
    # class 1: same angles shifted by π, same radius → the negated point
    assert torch.allclose(x1, -x0, atol=1e-6)
    assert r.max() <= 1.0 and r.min() >= 0.0


def test_spiral_is_seeded_and_noise_is_additive():
    a, _ = spiral(100, seed=1)
    b, _ = spiral(100, seed=1)
    c, _ = spiral(100, seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    noisy, _ = spiral(100, seed=1, noise=0.05)
    assert 0.02 < (noisy - a).std().item() < 0.08
    with pytest.raises(ValueError, match="even number"):
        spiral(101)


def test_grid_is_50_by_50_equally_spaced_on_unit_square():
    g = grid()
    assert g.shape == (2500, 2) and g.dtype == torch.float32
    axis = grid_axis()
    assert axis[0] == -1 and axis[-1] == 1
    assert torch.allclose(axis.diff(), torch.full((49,), 2 / 49))
    img = g.reshape(50, 50, 2)
    assert torch.equal(img[0, :, 0], axis) and torch.equal(img[:, 0, 1], axis)  # columns along x, rows along y
    with pytest.raises(ValueError):
        grid(1)


@pytest.mark.parametrize("name", TOY_DATASETS)
def test_every_set_is_balanced_enough_and_on_the_grid_square(name):
    x, y = make_points(name, 1000, seed=0, noise=0.1)
    assert x.shape == (1000, 2) and set(y.unique().tolist()) == {0, 1}
    assert x.abs().max() <= 1.5  # the unit square plus a few noise standard deviations
    assert 0.3 < y.float().mean() < 0.7


def test_playground_labels_follow_its_rules():
    x, y = make_points("xor", 2000, seed=0)
    assert torch.equal(y, (x[:, 0] * x[:, 1] >= 0).long())
    x, y = make_points("circle", 2000, seed=0)
    assert torch.equal(y, (x.norm(dim=1) < 2.5 / 6).long())
    x, y = make_points("gauss", 2000, seed=0)
    assert x[y == 1].mean(0).tolist() == pytest.approx([2 / 6, 2 / 6], abs=0.05)


def test_split_is_seeded_and_disjoint():
    x, y = spiral(1000)
    a = train_test_split(x, y, 0.8, seed=1)
    b = train_test_split(x, y, 0.8, seed=1)
    assert len(a.x_train) == 800 and len(a.x_test) == 200 and torch.equal(a.x_train, b.x_train)
    rows = {tuple(p) for p in a.x_train.tolist()} & {tuple(p) for p in a.x_test.tolist()}
    assert not rows
    d = make_toy_data(DataConfig(name="circle", n=200, seed=4))
    assert len(d.x_train) == 160 and d.num_classes == 2
    with pytest.raises(ValueError, match="unknown toy dataset"):
        make_points("moons", 10)
