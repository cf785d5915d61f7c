"""Residual Jacobians: ground truth on linear branches, autograd and finite differences, jvp/vjp operators,
randomized SVD through them, and Theorem 3.1 of *Residual Alignment: Uncovering the Mechanisms of Residual Networks*
(RA2+3+4 imply RA1) on a network built to satisfy it."""

import pytest
import torch

from lab.analysis.alignment import alignment_grid, inverse_sigma_fit, top_singular_values
from lab.analysis.jacobian import (
    block_jacobians,
    block_svds,
    jacobian_operator,
    jacobian_shapes,
    residual_jacobians,
)
from lab.analysis.svd import LinearOperator, randomized_svd
from lab.analysis.trajectories import trajectory_stats
from lab.nn.mlp import ResidualMLP
from lab.nn.resnets import ConvResNet, FCResNet
from lab.nn.timm_adapter import timm_resnet

f64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def with_running_stats(model: torch.nn.Module, shape: tuple[int, ...], seed: int = 0) -> torch.nn.Module:
    """Give BatchNorm non-trivial running statistics (a few train-mode passes), then return the model in eval."""
    model.train()
    with torch.no_grad():
        for k in range(3):
            model(torch.randn(32, *shape, generator=gen(seed + k), dtype=f64))
    return model.eval()


@pytest.fixture(scope="module")
def fc_post() -> FCResNet:
    torch.manual_seed(0)
    return with_running_stats(FCResNet(depth=3, width=6, in_dim=5, num_classes=3).double(), (5,))


@pytest.fixture(scope="module")
def fc_pre() -> FCResNet:
    torch.manual_seed(1)
    return with_running_stats(FCResNet(depth=3, width=6, in_dim=5, num_classes=3, preact=True).double(), (5,))


@pytest.fixture(scope="module")
def conv() -> ConvResNet:
    torch.manual_seed(2)
    model = ConvResNet(depths=(2,), channels=(4,), in_chans=1, feature_size=6, num_classes=3).double()
    return with_running_stats(model, (1, 6, 6))


def reference_jacobian(model: torch.nn.Module, x: torch.Tensor, i: int) -> torch.Tensor:
    """J_i by torch.autograd.functional.jacobian of the block with its skip term held fixed."""
    block = [b for _, b in model.iter_blocks()][i]
    h = model.forward_intermediates(x, intermediates_only=True)[i].detach()
    skip = block.alpha * h

    def f(v: torch.Tensor) -> torch.Tensor:
        z = skip + block.beta * block.branch(v.reshape(h.shape))
        return (z if block.post_act is None else block.post_act(z)).flatten()

    return torch.autograd.functional.jacobian(f, h.flatten())


@pytest.mark.parametrize("shortcut", ["identity", "linear", "scaled_branch"])
def test_jacobian_of_linear_branch_is_its_weight(shortcut):
    torch.manual_seed(0)
    model = ResidualMLP(depth=4, width=8, activation="identity", shortcut=shortcut, alpha_min=0.3).double().eval()
    x = torch.randn(3, 2, dtype=f64)
    J = residual_jacobians(model, x)
    assert J.shape == (3, 4, 8, 8)
    for i, block in enumerate(model.blocks):
        W = block.beta * block.branch.fc.weight  # skip excluded whatever α is; β is part of the branch's output
        assert torch.allclose(J[:, i], W.expand(3, 8, 8), atol=1e-12)


@pytest.mark.parametrize("which", ["fc_post", "fc_pre", "conv"])
def test_dense_matches_autograd(which, request):
    model = request.getfixturevalue(which)
    shape = (5,) if which != "conv" else (1, 6, 6)
    x = torch.randn(3, *shape, generator=gen(7), dtype=f64)
    J = residual_jacobians(model, x, chunk=2)  # chunks of 2 over a batch of 3
    L = len(list(model.iter_blocks()))
    D = 6 if which != "conv" else 4 * 36
    assert J.shape == (3, L, D, D)
    for b in range(3):
        for i in range(L):
            assert torch.allclose(J[b, i], reference_jacobian(model, x[b:b + 1], i), atol=1e-10)
    single = residual_jacobians(model, x[0])  # unbatched input
    assert single.shape == (L, D, D) and torch.allclose(single, J[0])
    assert torch.allclose(residual_jacobians(model, x[:1], blocks=[1]), J[0, 1:2])


def test_post_activation_factor_and_finite_differences(fc_post):
    x = torch.randn(1, 5, generator=gen(3), dtype=f64)
    block = fc_post.blocks[1]
    h = fc_post.forward_intermediates(x, intermediates_only=True)[1][0]
    J = residual_jacobians(fc_post, x, blocks=[1])[0]
    dF = torch.autograd.functional.jacobian(lambda v: block.branch(v[None])[0], h)
    with torch.no_grad():
        active = (h + block.branch(h[None])[0] > 0).to(f64)  # ReLU'(h + F(h))
    assert torch.allclose(J, active[:, None] * dF, atol=1e-12)

    def g(v: torch.Tensor) -> torch.Tensor:  # block output with the skip term frozen at h
        with torch.no_grad():
            return block.post_act(h + block.branch(v[None])[0])

    eps = 1e-6
    fd = torch.stack([(g(h + eps * e) - g(h - eps * e)) / (2 * eps) for e in torch.eye(6, dtype=f64)], dim=1)
    assert torch.allclose(J, fd, atol=1e-6)


@pytest.mark.parametrize("which", ["fc_post", "conv"])
def test_operator_matvecs_match_dense(which, request):
    model = request.getfixturevalue(which)
    shape = (5,) if which != "conv" else (1, 6, 6)
    x = torch.randn(1, *shape, generator=gen(11), dtype=f64)
    J = residual_jacobians(model, x, blocks=[1])[0]
    op = jacobian_operator(model, x, 1)
    assert isinstance(op, LinearOperator) and op.shape == J.shape and op.dtype == f64
    V = torch.randn(J.shape[1], 3, generator=gen(12), dtype=f64)
    U = torch.randn(J.shape[0], 3, generator=gen(13), dtype=f64)
    assert torch.allclose(op.matmat(V), J @ V, atol=1e-12)
    assert torch.allclose(op.rmatmat(U), J.T @ U, atol=1e-12)


def test_randomized_svd_through_operator_matches_dense(conv):
    x = torch.randn(1, 1, 6, 6, generator=gen(21), dtype=f64)
    J = residual_jacobians(conv, x, blocks=[0])[0]  # D = 4 · 6 · 6 = 144
    k = 5
    exact = torch.linalg.svdvals(J)[:k]
    _, S, _ = randomized_svd(jacobian_operator(conv, x, 0), k, iters=20, oversample=20, seed=0)
    assert ((S - exact).abs() / exact).max() <= 1e-4
    dense, matrix_free = block_svds(conv, x, k, oversample=20), block_svds(conv, x, k, dense_max_dim=10, oversample=20)
    for (_, s_d, _), (_, s_m, _) in zip(dense, matrix_free, strict=True):
        assert torch.allclose(s_d, s_m, rtol=1e-4)
    kinds = [type(j) for j in block_jacobians(conv, x, dense_max_dim=10)]
    assert kinds == [LinearOperator, LinearOperator]


def test_alignment_of_jacobian_with_its_own_svd_is_diag_sigma(fc_post):
    x = torch.randn(1, 5, generator=gen(5), dtype=f64)
    k = 4
    svds = block_svds(fc_post, x, k)
    grid = alignment_grid(block_jacobians(fc_post, x), k, svds=svds)  # [L, L, k, k]
    for i, (_, S, _) in enumerate(svds):
        assert torch.allclose(grid[i, i], torch.diag(S), atol=1e-10)


def test_theorem_3_1_aligned_rank_one_jacobians_give_equispaced_line():
    """Pre-activation, exact linearisations (linear branches), RA2 (one shared u), RA3 (rank one, binary) and RA4
    (σ_i = 1/i for the 1-based block i): Appendix A gives h_k = h_0 + k (uᵀh_0) u, a line with equal steps."""
    L, D = 6, 10
    model = ResidualMLP(depth=L, width=D, in_dim=2, num_classes=2, activation="identity").double().eval()
    u = torch.randn(D, generator=gen(0), dtype=f64)
    u /= u.norm()
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            block.branch.fc.weight.copy_(torch.outer(u, u) / (i + 1))
            block.branch.fc.bias.zero_()
    x = torch.randn(4, 2, generator=gen(1), dtype=f64)

    J = residual_jacobians(model, x[0])
    for i in range(L):
        assert torch.allclose(J[i], torch.outer(u, u) / (i + 1), atol=1e-12)
    svds = block_svds(model, x[0], 1)
    sigma1 = top_singular_values(J, 1)[:, 0]
    assert torch.allclose(sigma1, 1 / torch.arange(1, L + 1, dtype=f64))
    fit = inverse_sigma_fit(sigma1)
    assert fit["slope"] == pytest.approx(1.0) and fit["r2"] == pytest.approx(1.0)
    grid = alignment_grid(J, 1, svds=svds)[..., 0, 0].abs()  # |u_jᵀ J_i v_j| = σ_i: u diagonalises every J_i
    assert torch.allclose(grid, sigma1[:, None].expand(L, L))

    with torch.no_grad():
        states = torch.stack(model.forward_intermediates(x, intermediates_only=True))  # [L+1, n, D]
    stats = trajectory_stats(states)
    assert stats["straightness"] == pytest.approx(1.0, abs=1e-12)
    assert stats["spacing_cv"] == pytest.approx(0.0, abs=1e-12)
    h0 = states[0]
    for k in range(L + 1):
        assert torch.allclose(states[k], h0 + k * (h0 @ u)[:, None] * u, atol=1e-12)


def test_training_flags_are_restored_and_operator_stays_in_eval(fc_post):
    model = fc_post
    model.train()
    model.blocks[0].branch[1].eval()  # a frozen BatchNorm: mixed flags must survive
    try:
        x = torch.randn(1, 5, generator=gen(9), dtype=f64)
        J = residual_jacobians(model, x, blocks=[2])[0]
        op = jacobian_operator(model, x, 2)
        block_svds(model, x, 2)
        assert model.training and model.blocks[2].branch[1].training
        assert not model.blocks[0].branch[1].training
        V = torch.randn(6, 2, generator=gen(10), dtype=f64)
        assert torch.allclose(op.matmat(V), J @ V, atol=1e-12)  # BatchNorm used running stats, not the batch
        assert model.training
    finally:
        model.eval()


def test_timm_adapter_blocks_including_a_projection():
    torch.manual_seed(0)
    model = timm_resnet("resnet18", num_classes=3).double().eval()
    x = torch.randn(1, 3, 8, 8, generator=gen(4), dtype=f64)  # layer1 at 2 × 2: D = 64 · 4 = 256
    J = residual_jacobians(model, x, blocks=[0, 1])
    assert J.shape == (2, 256, 256)
    block = [b for _, b in model.iter_blocks()][2]  # stage 2's first block: 1×1 strided projection shortcut
    assert block.has_projection
    op = jacobian_operator(model, x, 2)
    assert op.shape == (128, 256)
    dense = block_jacobians(model, x, blocks=[2])[0]
    h = model.forward_intermediates(x, intermediates_only=True)[2].detach()
    with torch.no_grad():
        skip = block.shortcut(h)
    ref = torch.autograd.functional.jacobian(
        lambda v: block.post_act(skip + block.branch(v.reshape(h.shape))).flatten(), h.flatten())
    assert torch.allclose(dense, ref, atol=1e-10)
    V = torch.randn(256, 2, generator=gen(6), dtype=f64)
    assert torch.allclose(op.matmat(V), dense @ V, atol=1e-10)
    with pytest.raises(ValueError, match="differ in shape"):
        residual_jacobians(model, x, blocks=[1, 2])


def test_jacobian_shapes_and_writing_into_a_buffer(fc_post):
    assert jacobian_shapes(fc_post, torch.randn(2, 5, dtype=f64)) == [(6, 6)] * 3
    torch.manual_seed(5)
    two_stages = ConvResNet(depths=(1, 1), channels=(2, 4), in_chans=1, feature_size=None, num_classes=3).double()
    assert jacobian_shapes(two_stages, torch.randn(1, 1, 4, 4, dtype=f64)) == [(32, 32), (16, 16)]
    x = torch.randn(3, 5, generator=gen(14), dtype=f64)
    buffer = torch.full((3, 2, 6, 6), float("nan"), dtype=f64)
    out = residual_jacobians(fc_post, x, blocks=[0, 2], chunk=2, out=buffer)
    assert out is buffer
    torch.testing.assert_close(buffer, residual_jacobians(fc_post, x, blocks=[0, 2]), atol=0, rtol=0)
    with pytest.raises(ValueError, match="out must be"):
        residual_jacobians(fc_post, x, out=torch.empty(3, 2, 6, 6, dtype=f64))


def test_the_first_jacobian_of_a_process_prints_no_warning_from_torch():
    """torch loads forward-mode AD's decompositions with torch.jit.script on the first jvp, which warns; a notebook
    cell or page log that analyses a model should not show it (a fresh process: the load happens once)."""
    import subprocess
    import sys

    code = ("import torch; from lab.nn.registry import create_model; from lab.analysis.jacobian import "
            "residual_jacobians; m = create_model('fc_resnet', depth=2, width=8, in_dim=4, num_classes=3); "
            "residual_jacobians(m, torch.randn(3, 4))")
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr
