"""RA1 trajectories: straightness and spacing on paths with known shape, and their 2-D projections."""

import math

import numpy as np
import pytest
import torch

from lab.analysis.embed import pca
from lab.analysis.trajectories import project_trajectories, trajectory_stats

D = 24


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def line_states(steps: np.ndarray, n: int = 3, seed: int = 0) -> torch.Tensor:
    """States h_l = h_0 + t_l u per input, with cumulative positions t from the given step lengths."""
    g = gen(seed)
    t = np.concatenate([[0.0], np.cumsum(steps)])
    h0 = torch.randn(n, D, generator=g, dtype=torch.float64)
    u = torch.nn.functional.normalize(torch.randn(n, D, generator=g, dtype=torch.float64), dim=1)
    return h0[None] + torch.tensor(t)[:, None, None] * u[None]


def test_trajectory_stats_line_zigzag_and_uneven():
    straight = trajectory_stats(line_states(np.full(8, 0.5)))
    assert straight["straightness"] == pytest.approx(1.0, abs=1e-12)
    assert straight["spacing_cv"] == pytest.approx(0.0, abs=1e-12)
    assert straight["straightness_per_input"].shape == (3,) and straight["step_lengths"].shape == (8, 3)

    uneven = trajectory_stats(line_states(np.array([1.0, 2.0, 4.0, 8.0])))
    assert uneven["straightness"] == pytest.approx(1.0, abs=1e-12)
    assert uneven["spacing_cv"] == pytest.approx(np.std([1, 2, 4, 8]) / np.mean([1, 2, 4, 8]))

    zig = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 0.0], [3.0, 1.0], [4.0, 0.0]], dtype=torch.float64)
    out = trajectory_stats(zig)  # single input [L+1, D]
    assert out["straightness"] == pytest.approx(4.0 / (4 * math.sqrt(2)))
    assert out["spacing_cv"] == pytest.approx(0.0, abs=1e-12)  # equal steps, but bent

    still = trajectory_stats(torch.zeros(4, 2, 3))
    assert math.isnan(still["straightness"]) and math.isnan(still["spacing_cv"])
    with pytest.raises(ValueError):
        trajectory_stats(torch.zeros(1, 2, 3))


def test_project_trajectories():
    states = line_states(np.full(6, 1.0), n=4)
    for basis in ("gaussian", "pca"):
        xy = project_trajectories(states, basis=basis)
        assert xy.shape == (7, 4, 2) and torch.isfinite(xy).all()
        # a straight, equally spaced trajectory stays straight and equally spaced after a linear projection
        stats = trajectory_stats(xy)
        assert stats["straightness"] == pytest.approx(1.0, abs=1e-10)
        assert stats["spacing_cv"] == pytest.approx(0.0, abs=1e-10)
    g1 = project_trajectories(states, seed=1)
    torch.testing.assert_close(g1, project_trajectories(states, seed=1), rtol=0, atol=0)
    assert not torch.allclose(g1, project_trajectories(states, seed=2))
    torch.testing.assert_close(
        project_trajectories(states, basis="pca"), pca(states.reshape(-1, D))[0].reshape(7, 4, 2)
    )
    as_np = project_trajectories(states.numpy(), seed=1)
    assert isinstance(as_np, np.ndarray)
    np.testing.assert_allclose(as_np, g1.numpy())
    with pytest.raises(ValueError):
        project_trajectories(states, basis="tsne")
