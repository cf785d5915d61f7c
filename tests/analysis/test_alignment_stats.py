"""alignment_stats against the exact per-input path: dense SVDs of residual_jacobians, alignment_grid, random_baseline.

The statistics of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* (RA2–RA4) for a batch.
"""

import math

import pytest
import torch

from lab.analysis.alignment import (
    alignment_grid,
    alignment_score,
    alignment_scores,
    jacobian_svds,
    random_baseline,
)
from lab.analysis.alignment_stats import alignment_stats
from lab.analysis.jacobian import jacobian_layouts, residual_jacobians
from lab.nn.mlp import ResidualMLP
from lab.nn.resnets import ConvResNet, FCResNet

f64 = torch.float64
TOL = 1e-3


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def untrained_fc() -> FCResNet:
    torch.manual_seed(0)
    return FCResNet(depth=4, width=128, in_dim=8, num_classes=3).eval()


def trained_like_fc() -> FCResNet:
    """A few hundred Adam steps on three Gaussian clusters: BatchNorm statistics and a decaying spectrum."""
    torch.manual_seed(1)
    model = FCResNet(depth=4, width=128, in_dim=8, num_classes=3)
    centers = torch.randn(3, 8, generator=gen(2)) * 3
    y = torch.arange(240) % 3
    x = centers[y] + torch.randn(240, 8, generator=gen(3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


def exact(model: torch.nn.Module, x: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
    """The per-input reference: float64 Jacobians, torch.linalg.svd, alignment_grid."""
    J = residual_jacobians(model, x).double()  # [N, L, D, D]
    sigma, scores, grids = [], [], []
    for Jb in J:
        svds = jacobian_svds(Jb, k)
        grid = alignment_grid(Jb, k, svds=svds)
        sigma.append(torch.stack([s for _, s, _ in svds]))
        scores.append(alignment_scores(grid))
        grids.append(grid)
    return {"J": J, "sigma": torch.stack(sigma), "scores": torch.stack(scores), "grid": torch.stack(grids)}


@pytest.fixture(scope="module", params=["untrained", "trained_like"])
def fc_case(request):
    model = untrained_fc() if request.param == "untrained" else trained_like_fc()
    x = torch.randn(5, 8, generator=gen(4))
    k = 6
    return model, x, k, alignment_stats(model, x, k, grid_inputs=2), exact(model, x, k)


def test_shapes_and_dtypes(fc_case):
    _, x, k, stats, _ = fc_case
    N, L = len(x), 4
    expected = {"sigma": (N, L, k), "scores": (N, L, L), "grid": (2, L, L, k, k), "baseline": (L,),
                "baseline_std": (L,), "baseline_trials": (8, L)}
    assert {key: tuple(v.shape) for key, v in stats.items()} == expected
    assert all(v.dtype == torch.float32 and v.device.type == "cpu" for v in stats.values())


def test_sigma_matches_exact_svd(fc_case):
    _, _, _, stats, ref = fc_case
    rel = (stats["sigma"].double() - ref["sigma"]).abs() / ref["sigma"]
    assert rel.max() <= TOL
    assert torch.all(stats["sigma"][..., :-1] >= stats["sigma"][..., 1:])


def test_scores_and_grid_match_alignment_grid(fc_case):
    _, _, _, stats, ref = fc_case
    assert (stats["scores"].double() - ref["scores"]).abs().max() <= TOL
    torch.testing.assert_close(stats["scores"].diagonal(dim1=1, dim2=2), torch.ones(5, 4), atol=1e-5, rtol=0)
    # Singular vectors are defined up to a joint sign flip of (u_r, v_r): compare magnitudes.
    scale = ref["sigma"].max()
    assert (stats["grid"].double().abs() - ref["grid"][:2].abs()).abs().max() <= TOL * scale
    own = torch.stack([stats["grid"][1, i, i].diagonal() for i in range(4)])  # grid[g, i, i] = diag(σ_i)
    torch.testing.assert_close(own.abs(), stats["sigma"][1], atol=1e-5, rtol=1e-4)


def test_off_diagonal_scores_are_not_trivially_one(fc_case):
    """The comparison above has teeth: unrelated blocks of an untrained net score well below 1."""
    model, _, _, stats, _ = fc_case
    off = stats["scores"][:, ~torch.eye(4, dtype=torch.bool)]
    assert off.mean() < 0.9


def test_baseline_is_random_baseline_at_one_input():
    model = untrained_fc()
    x = torch.randn(1, 8, generator=gen(5))
    k, trials = 5, 6
    stats = alignment_stats(model, x, k, baseline_trials=trials, seed=3)
    J = residual_jacobians(model, x)  # one input: [L, D, D]
    for i in range(4):
        ref = random_baseline(J[i], k, trials=trials, seed=3)
        assert stats["baseline"][i].item() == pytest.approx(ref["mean"], abs=1e-6)
        assert stats["baseline_std"][i].item() == pytest.approx(ref["std"], abs=1e-6)


def random_baseline_bases(m: int, n: int, k: int, trials: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The Haar bases random_baseline draws (its documented recipe), to check which input each trial used."""
    g = gen(seed)

    def haar(rows: int) -> torch.Tensor:
        Q, R = torch.linalg.qr(torch.randn(trials, rows, k, generator=g, dtype=f64))
        return Q * torch.sign(R.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)

    return haar(m), haar(n)


def test_baseline_trials_are_spread_over_inputs():
    """Trial t is evaluated at input t mod N, so the cost does not grow with N."""
    model = untrained_fc()
    x = torch.randn(2, 8, generator=gen(6))
    k = 5
    stats = alignment_stats(model, x, k, baseline_trials=3, seed=1)
    U, V = random_baseline_bases(128, 128, k, 3, seed=1)
    J = residual_jacobians(model, x).double()
    per_trial = torch.stack([alignment_score(U[t].T @ J[t % 2] @ V[t]) for t in range(3)])  # [3, L]
    torch.testing.assert_close(stats["baseline"].double(), per_trial.mean(dim=0), atol=1e-6, rtol=0)
    torch.testing.assert_close(stats["baseline_std"].double(), per_trial.std(dim=0), atol=1e-6, rtol=0)


def test_baseline_is_chance_level():
    model = untrained_fc()
    x = torch.randn(8, 8, generator=gen(6))
    k = 8
    stats = alignment_stats(model, x, k, baseline_trials=64)
    assert torch.all((0.5 / k < stats["baseline"]) & (stats["baseline"] < 2.0 / k))
    assert torch.all(stats["baseline_std"] > 0)
    assert torch.equal(alignment_stats(model, x, k, baseline_trials=1)["baseline_std"], torch.zeros(4))
    with pytest.raises(ValueError, match="baseline_trials"):
        alignment_stats(model, x, k, baseline_trials=0)


def test_operator_path_agrees_with_dense_path():
    torch.manual_seed(2)
    model = ConvResNet(depths=(2,), channels=(4,), in_chans=1, feature_size=8, num_classes=3).eval()
    x = torch.randn(2, 1, 8, 8, generator=gen(7))  # D = 4 · 8 · 8 = 256
    k = 5
    dense = alignment_stats(model, x, k, grid_inputs=2)
    matrix_free = alignment_stats(model, x, k, grid_inputs=2, dense_max_dim=64)
    ref = exact(model, x, k)
    for stats in (dense, matrix_free):
        assert ((stats["sigma"].double() - ref["sigma"]).abs() / ref["sigma"]).max() <= TOL
        assert (stats["scores"].double() - ref["scores"]).abs().max() <= TOL
    assert (dense["grid"].abs() - matrix_free["grid"].abs()).abs().max() <= TOL * ref["sigma"].max()
    torch.testing.assert_close(dense["baseline"], matrix_free["baseline"], atol=1e-5, rtol=0)


def test_blocks_of_different_shape_give_nan_pairs():
    torch.manual_seed(3)
    model = ConvResNet(depths=(2, 2), channels=(8, 16), in_chans=1, feature_size=4, num_classes=3).eval()
    x = torch.randn(3, 1, 8, 8, generator=gen(8))  # stage 1: 8 · 4 · 4 = 128, stage 2: 16 · 2 · 2 = 64
    k = 4
    stats = alignment_stats(model, x, k, grid_inputs=1)
    same = torch.zeros(4, 4, dtype=torch.bool)
    same[:2, :2] = same[2:, 2:] = True
    assert torch.all(stats["scores"][:, same].isfinite()) and torch.all(stats["scores"][:, ~same].isnan())
    assert torch.all(stats["grid"][0][same].isfinite()) and torch.all(stats["grid"][0][~same].isnan())
    assert torch.all(stats["sigma"].isfinite()) and torch.all(stats["baseline"].isfinite())
    J = [residual_jacobians(model, x, blocks=b).double() for b in ([0, 1], [2, 3])]
    sigma = torch.cat([torch.linalg.svdvals(j)[..., :k] for j in J], dim=1)
    assert ((stats["sigma"].double() - sigma).abs() / sigma).max() <= TOL
    scores = alignment_scores(alignment_grid(J[1][2], k))  # input 2, stage 2
    assert (stats["scores"][2, 2:, 2:].double() - scores).abs().max() <= TOL


def test_training_flags_restored_and_bad_arguments():
    torch.manual_seed(4)
    model = ResidualMLP(depth=3, width=10, in_dim=2, num_classes=2)
    model.train()
    model.blocks[1].eval()  # mixed flags survive
    x = torch.randn(4, 2, generator=gen(9))
    stats = alignment_stats(model, x, 3)
    assert model.training and not model.blocks[1].training and model.blocks[0].training
    assert stats["sigma"].shape == (4, 3, 3) and not math.isnan(stats["sigma"].sum().item())
    for bad in (0, 11):
        with pytest.raises(ValueError, match="k=") as err:
            alignment_stats(model, x, bad)
        assert "10" in str(err.value)
    with pytest.raises(ValueError, match="grid_inputs"):
        alignment_stats(model, x, 3, grid_inputs=5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_model_matches_cpu():
    model, x, k = untrained_fc(), torch.randn(3, 8, generator=gen(10)), 6
    cpu = alignment_stats(model, x, k)
    gpu = alignment_stats(model.cuda(), x.cuda(), k)
    assert all(v.device.type == "cpu" for v in gpu.values())
    assert ((gpu["sigma"] - cpu["sigma"]).abs() / cpu["sigma"]).max() <= TOL
    assert (gpu["scores"] - cpu["scores"]).abs().max() <= TOL
    torch.testing.assert_close(gpu["baseline"], cpu["baseline"], atol=1e-4, rtol=0)


def test_blocks_of_equal_size_in_different_layouts_are_not_compared():
    """A conv net's stages can share a size D in different layouts (here 8 × 2 × 2 and 32 × 1 × 1 = 32): their
    Jacobians act on different spaces, so their pairs are NaN, as pairs of different sizes are."""
    from lab.nn.networks import build_network, residual_view

    torch.manual_seed(0)
    view = residual_view(build_network("torchvision:resnet18", num_classes=3)).eval()
    x = torch.randn(2, 3, 16, 16)
    layouts = jacobian_layouts(view, x)
    sizes = [math.prod(layout[1]) for layout in layouts]
    same_size = [(i, j) for i in range(8) for j in range(8) if i != j and sizes[i] == sizes[j]
                 and layouts[i] != layouts[j]]
    assert same_size, (layouts, "the test needs two blocks of one size in two layouts")
    stats = alignment_stats(view, x, 3, baseline_trials=2)
    for i, j in same_size:
        assert torch.isnan(stats["scores"][:, i, j]).all(), (i, j)
    i, j = next((i, j) for i in range(8) for j in range(8) if i != j and layouts[i] == layouts[j])
    assert torch.isfinite(stats["scores"][:, i, j]).all()
