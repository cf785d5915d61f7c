"""Residual Alignment metrics on Jacobians with known structure, and RA2–RA4 implying RA1 (Theorem 3.1).

The metrics of *Residual Alignment: Uncovering the Mechanisms of Residual Networks*.
"""

import math

import numpy as np
import pytest
import torch

from lab.analysis.alignment import (
    alignment_grid,
    alignment_matrix,
    alignment_score,
    alignment_scores,
    haar_bases,
    inverse_sigma_fit,
    jacobian_svds,
    random_baseline,
    top_singular_values,
)
from lab.analysis.svd import LinearOperator, randomized_svd
from lab.analysis.trajectories import trajectory_stats

D = 24


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def orthonormal(n: int, r: int, seed: int) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(n, r, generator=gen(seed), dtype=torch.float64)).Q


def aligned_jacobians(L: int, rank: int, seed: int = 0) -> torch.Tensor:
    """RA2+RA3+RA4 by construction (Theorem 3.1): J_i = U0 diag(s_i) U0ᵀ, top value 1/i, shared U0 [D, rank]."""
    U0 = orthonormal(D, rank, seed)
    decay = torch.linspace(1.0, 0.2, rank, dtype=torch.float64)
    return torch.stack([(U0 * (decay / i)) @ U0.T for i in range(1, L + 1)])


def random_jacobians(L: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(L, D, D, generator=gen(seed), dtype=torch.float64) / math.sqrt(D)


def as_op(J: torch.Tensor) -> LinearOperator:
    """Matrix-free view of J (closures only), as the Jacobian code provides via jvp/vjp."""
    return LinearOperator(
        tuple(J.shape),
        lambda X: torch.einsum("ab,bk->ak", J, X),
        lambda Y: torch.einsum("ab,ak->bk", J, Y),
        dtype=J.dtype,
    )


def test_alignment_matrix_of_j_with_itself_is_diag_sigma():
    J = random_jacobians(1)[0]
    k = 6
    sigma = torch.linalg.svdvals(J)[:k]
    A = alignment_matrix(J, J, k)
    torch.testing.assert_close(A, torch.diag(sigma), atol=1e-12, rtol=0)
    assert alignment_score(A).item() == pytest.approx(1.0, abs=1e-12)
    # VJU is diagonal for a symmetric J (U = V up to sign); not for a generic one.
    S = J + J.T
    assert alignment_score(alignment_matrix(S, S, k, variant="VJU")).item() == pytest.approx(1.0, abs=1e-12)
    assert alignment_score(alignment_matrix(J, J, k, variant="VJU")).item() < 0.9


def test_random_baseline_is_well_below_aligned_score():
    J = random_jacobians(1, seed=2)[0]
    k = 8
    base = random_baseline(J, k, trials=200, seed=0)
    assert set(base) == {"mean", "std", "trials"}
    assert 0.5 / k < base["mean"] < 2.5 / k  # about 1/k for unrelated bases
    assert 0 < base["std"] < 0.2
    assert base == random_baseline(J, k, trials=200, seed=0)  # seeded
    assert random_baseline(as_op(J), k, trials=200, seed=0)["mean"] == pytest.approx(base["mean"], rel=1e-12)
    # Unrelated Jacobians score near the baseline, aligned ones score 1.
    other = random_jacobians(1, seed=3)[0]
    unrelated = alignment_score(alignment_matrix(J, other, k)).item()
    assert unrelated < base["mean"] + 4 * base["std"] < 1.0


def test_haar_bases_are_orthonormal_seeded_and_what_random_baseline_uses():
    U, V = haar_bases(12, 9, 4, 5, seed=3)
    assert U.shape == (5, 12, 4) and V.shape == (5, 9, 4) and U.dtype == torch.float64
    eye = torch.eye(4, dtype=torch.float64).expand(5, 4, 4)
    torch.testing.assert_close(U.mT @ U, eye, atol=1e-12, rtol=0)
    torch.testing.assert_close(V.mT @ V, eye, atol=1e-12, rtol=0)
    again = haar_bases(12, 9, 4, 5, seed=3)
    assert torch.equal(U, again[0]) and torch.equal(V, again[1])
    assert not torch.equal(U, haar_bases(12, 9, 4, 5, seed=4)[0])
    J = torch.randn(12, 9, generator=gen(1), dtype=torch.float64)
    scores = alignment_score(U.mT @ J @ V)
    base = random_baseline(J, 4, trials=5, seed=3)
    assert base["mean"] == pytest.approx(scores.mean().item(), rel=1e-12)
    assert base["std"] == pytest.approx(scores.std().item(), rel=1e-12)


def test_alignment_grid_aligned_vs_random():
    L, k = 5, 4
    aligned = alignment_scores(alignment_grid(aligned_jacobians(L, rank=k), k))
    assert aligned.shape == (L, L)
    torch.testing.assert_close(aligned, torch.ones(L, L, dtype=torch.float64), atol=1e-10, rtol=0)
    scores = alignment_scores(alignment_grid(random_jacobians(L), k))
    torch.testing.assert_close(scores.diagonal(), torch.ones(L, dtype=torch.float64), atol=1e-12, rtol=0)
    off = scores[~torch.eye(L, dtype=torch.bool)]
    assert off.max() < 0.8 and off.mean() < 0.5


@pytest.mark.parametrize("variant", ["UJV", "VJU"])
def test_alignment_grid_matches_pairwise_and_operator_path(variant):
    L, k = 4, 5
    Js = random_jacobians(L, seed=9)
    grid = alignment_grid(Js, k, variant=variant)
    assert grid.shape == (L, L, k, k)
    for i in range(L):
        for j in range(L):
            torch.testing.assert_close(grid[i, j], alignment_matrix(Js[i], Js[j], k, variant=variant))
    # Matrix-free path with randomized SVDs passed in, as for large D. Random Gaussian spectra have small gaps, so
    # compare with a spectrum that has a clear gap after k.
    spec = torch.cat([torch.linspace(2.0, 1.0, k, dtype=torch.float64), 0.05 * torch.ones(D - k, dtype=torch.float64)])
    Js = torch.stack([(orthonormal(D, D, 20 + i) * spec) @ orthonormal(D, D, 40 + i).T for i in range(L)])
    ops = [as_op(J) for J in Js]
    svds = [randomized_svd(op, k) for op in ops]
    grid_op = alignment_grid(ops, k, variant=variant, svds=svds)
    # Singular vectors are defined up to sign (and the exact path picks its own), so compare |entries|.
    torch.testing.assert_close(grid_op.abs(), alignment_grid(Js, k, variant=variant).abs(), atol=1e-8, rtol=0)
    torch.testing.assert_close(alignment_grid(ops, k, variant=variant).abs(), grid_op.abs(), atol=1e-8, rtol=0)


def test_precomputed_svd_is_used_and_validated():
    Js = random_jacobians(2, seed=4)
    svd = jacobian_svds(Js, 3)[1]
    torch.testing.assert_close(alignment_matrix(Js[0], None, 3, svd=svd), alignment_matrix(Js[0], Js[1], 3))
    with pytest.raises(ValueError):
        alignment_matrix(Js[0], None, 5, svd=svd)  # only 3 vectors
    with pytest.raises(ValueError):
        alignment_matrix(Js[0], None, 3)
    with pytest.raises(ValueError):
        alignment_matrix(Js[0], Js[1], 3, variant="JUV")
    with pytest.raises(ValueError):
        alignment_grid(Js, 3, svds=[svd])


def test_alignment_score_edge_cases():
    assert math.isnan(alignment_score(torch.zeros(3, 3)).item())
    A = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    assert alignment_score(A).item() == pytest.approx(9 / 25)
    assert alignment_score(torch.stack([A, torch.eye(2)])).tolist() == pytest.approx([9 / 25, 1.0])


def test_top_singular_values_dense_and_precomputed():
    Js = random_jacobians(3, seed=5)
    expected = torch.linalg.svdvals(Js)[:, :4]
    torch.testing.assert_close(top_singular_values(Js, 4), expected)
    torch.testing.assert_close(top_singular_values(list(Js), 4), expected)
    torch.testing.assert_close(top_singular_values(None, 4, svds=jacobian_svds(Js, 4)), expected)
    with pytest.raises(ValueError):
        top_singular_values(None, 5, svds=jacobian_svds(Js, 4))


def test_inverse_sigma_fit_recovers_ra4_line():
    L = 12
    i = np.arange(1, L + 1)
    fit = inverse_sigma_fit(1.0 / i)
    assert fit["slope"] == pytest.approx(1.0, abs=1e-12)
    assert fit["intercept"] == pytest.approx(0.0, abs=1e-10)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(fit["inv_sigma"], i)
    np.testing.assert_array_equal(fit["index"], i)
    # RA begins at block 5: earlier blocks are off the line and excluded with start=4.
    sigma = 1.0 / (2.0 * i + 3.0)
    sigma[:4] = [0.9, 0.1, 0.5, 0.05]
    fit = inverse_sigma_fit(torch.tensor(sigma), start=4)
    assert (fit["slope"], fit["intercept"], fit["r2"]) == pytest.approx((2.0, 3.0, 1.0), abs=1e-9)
    assert inverse_sigma_fit(sigma)["r2"] < 0.9
    assert math.isnan(inverse_sigma_fit(np.ones(4))["r2"])
    with pytest.raises(ValueError):
        inverse_sigma_fit(np.ones(3), start=2)
    with pytest.raises(ValueError):
        inverse_sigma_fit(np.array([1.0, 0.0, 0.5]))


def test_theorem_3_1_end_to_end():
    """RA2+3+4 with exact linearisation h_{i+1} = (I + J_i) h_i give equispaced states on a line (RA1)."""
    L, n = 10, 6
    Js = aligned_jacobians(L, rank=1, seed=1)  # rank one, shared vector, σ_i = 1/i
    h = torch.randn(n, D, generator=gen(2), dtype=torch.float64)
    states = [h]
    for J in Js:
        states.append(states[-1] + states[-1] @ J.T)
    states = torch.stack(states)
    stats = trajectory_stats(states)
    assert stats["straightness"] == pytest.approx(1.0, abs=1e-10)
    assert stats["spacing_cv"] == pytest.approx(0.0, abs=1e-10)
    fit = inverse_sigma_fit(top_singular_values(Js, 1)[:, 0])
    assert fit["slope"] == pytest.approx(1.0, abs=1e-10) and fit["r2"] == pytest.approx(1.0, abs=1e-12)
