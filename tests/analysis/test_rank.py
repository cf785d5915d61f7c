"""Effective rank (Roy & Vetterli) and the feature rank of *Residual Connections Harm Generative Representation
Learning*, against closed forms."""

import math

import numpy as np
import pytest
import torch

from lab.analysis.rank import (
    effective_rank,
    effective_rank_from_singular_values,
    feature_rank,
    spectral_entropy,
    spectral_entropy_from_singular_values,
)


def orthonormal(n: int, r: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64)).Q


def with_spectrum(m: int, n: int, s: torch.Tensor, seed: int = 0) -> torch.Tensor:
    return (orthonormal(m, len(s), seed) * s) @ orthonormal(n, len(s), seed + 1).T


def closed_form_entropy(s) -> float:
    p = np.asarray(s, dtype=np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


@pytest.mark.parametrize("n", [1, 3, 17])
def test_identity_has_full_effective_rank(n):
    assert effective_rank(torch.eye(n, dtype=torch.float64)).item() == pytest.approx(n, rel=1e-12)
    assert spectral_entropy(torch.eye(n, dtype=torch.float64)).item() == pytest.approx(math.log(n), abs=1e-12)


def test_rank_one_is_one():
    u, v = torch.randn(30, 1, dtype=torch.float64), torch.randn(1, 12, dtype=torch.float64)
    assert effective_rank(5.0 * u @ v).item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("s", [[4.0, 2.0, 1.0, 1.0], [1.0, 1e-3, 1e-6], [3.0, 3.0, 0.0, 0.0, 0.0]])
def test_known_spectrum_matches_closed_form(s):
    s = torch.tensor(s, dtype=torch.float64)
    M = with_spectrum(9, 7, s)
    h = closed_form_entropy(s)
    assert spectral_entropy(M).item() == pytest.approx(h, abs=1e-9)
    assert effective_rank(M).item() == pytest.approx(math.exp(h), rel=1e-9)
    # exact from the spectrum, in any order
    assert effective_rank_from_singular_values(s.flip(0)).item() == pytest.approx(math.exp(h), rel=1e-12)


def test_entropy_is_log_of_effective_rank_and_batched():
    g = torch.Generator().manual_seed(0)
    M = torch.randn(4, 3, 10, 6, generator=g, dtype=torch.float64) * torch.logspace(0, -3, 6, dtype=torch.float64)
    er, h = effective_rank(M), spectral_entropy(M)
    assert er.shape == h.shape == (4, 3)
    torch.testing.assert_close(h, torch.log(er))
    torch.testing.assert_close(er[2, 1], effective_rank(M[2, 1]))
    assert torch.all((er >= 1) & (er <= 6))


def test_zero_matrix_convention_and_validation():
    assert effective_rank(torch.zeros(5, 4)).item() == 0.0
    assert spectral_entropy(torch.zeros(5, 4)).item() == 0.0
    batch = torch.stack([torch.zeros(3, 3), torch.eye(3)])
    torch.testing.assert_close(effective_rank(batch), torch.tensor([0.0, 3.0]))
    with pytest.raises(ValueError):
        spectral_entropy_from_singular_values(torch.tensor([1.0, -0.5]))
    with pytest.raises(ValueError):
        effective_rank_from_singular_values(torch.tensor([1.0, float("nan")]))


def test_numpy_input():
    assert float(effective_rank(np.eye(4))) == pytest.approx(4.0)


def test_feature_rank_default_is_torch_cov_of_samples():
    # the paper: singular values of A(i, j) = covariance of sample i's and sample j's features = torch.cov(X).
    g = torch.Generator().manual_seed(1)
    X = torch.randn(40, 25, generator=g, dtype=torch.float64) @ torch.diag(
        torch.logspace(0, -2, 25, dtype=torch.float64)
    )
    s_ref = torch.linalg.svdvals(torch.cov(X))  # [40, 40], formed explicitly
    assert feature_rank(X).item() == pytest.approx(effective_rank_from_singular_values(s_ref).item(), rel=1e-9)
    assert feature_rank(X, measure="entropy").item() == pytest.approx(
        spectral_entropy_from_singular_values(s_ref).item(), rel=1e-9
    )


def test_feature_rank_centering_options_and_closed_form():
    s = torch.tensor([3.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    X = with_spectrum(30, 12, s, seed=5)
    # Raw Gram X Xᵀ has singular values s² exactly.
    assert feature_rank(X, center="none").item() == pytest.approx(math.exp(closed_form_entropy(s**2)), rel=1e-9)
    # Feature centring = the usual covariance: same non-zero spectrum as the d x d covariance.
    Xc = X - X.mean(0)
    s_cov = torch.linalg.eigvalsh(Xc.T @ Xc).clamp_min(0)
    assert feature_rank(X, center="feature").item() == pytest.approx(
        effective_rank_from_singular_values(s_cov).item(), rel=1e-9
    )
    torch.testing.assert_close(
        feature_rank(X, center="feature", measure="entropy"), torch.log(feature_rank(X, center="feature"))
    )
    # Squares matter: this is not the effective rank of X itself.
    assert feature_rank(X, center="none").item() < effective_rank(X).item()
    # Identical samples: zero covariance -> documented 0.
    assert feature_rank(torch.ones(6, 3), center="feature").item() == 0.0
    with pytest.raises(ValueError):
        feature_rank(X, measure="rank")
    with pytest.raises(ValueError):
        feature_rank(X, center="both")


def test_feature_rank_tracks_low_rank_structure():
    g = torch.Generator().manual_seed(2)
    low = torch.randn(200, 2, generator=g) @ torch.randn(2, 64, generator=g) + 0.01 * torch.randn(200, 64, generator=g)
    high = torch.randn(200, 64, generator=g)
    assert feature_rank(low).item() < 3 < 30 < feature_rank(high).item()
