"""Neural-collapse metrics on constructed features with known collapse (Papyan, Han & Donoho 2020)."""

import math

import numpy as np
import pytest
import torch

from lab.analysis.collapse import collapse_by_layer, collapse_metrics

C, D, PER = 5, 16, 20


def simplex_etf(C: int, d: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    """Class means [C, d]: the standard simplex ETF sqrt(C/(C-1)) (I - 11ᵀ/C) rotated into R^d."""
    g = torch.Generator().manual_seed(seed)
    P = torch.linalg.qr(torch.randn(d, C, generator=g, dtype=torch.float64)).Q  # [d, C] orthonormal
    M = math.sqrt(C / (C - 1)) * (torch.eye(C, dtype=torch.float64) - 1.0 / C)
    return scale * M @ P.T


def samples(means: torch.Tensor, per: int, noise: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(len(means)).repeat_interleave(per)
    H = means[y] + noise * torch.randn(len(y), means.shape[1], generator=g, dtype=torch.float64)
    return H, y


def brute_force_nc1(H: np.ndarray, y: np.ndarray) -> float:
    classes = np.unique(y)
    mu_g = H.mean(0)
    mus = np.stack([H[y == c].mean(0) for c in classes])
    dev = H - mus[np.searchsorted(classes, y)]
    sw = dev.T @ dev / len(H)
    sb = (mus - mu_g).T @ (mus - mu_g) / len(classes)
    return float(np.trace(sw @ np.linalg.pinv(sb, hermitian=True)) / len(classes))


def test_perfect_collapse_onto_simplex_etf_is_all_zero():
    means = simplex_etf(C, D, scale=3.0)
    H, y = samples(means, PER, noise=0.0)
    out = collapse_metrics(H, y, classifier_weight=2.0 * means)
    for key in (
        "nc1",
        "nc2_equinorm",
        "nc2_equiangular",
        "nc2_maxangle",
        "nc3",
        "nc3_frobenius",
        "nc4",
        "nc2_w_equinorm",
        "nc2_w_equiangular",
        "nc2_w_maxangle",
    ):
        assert out[key] == pytest.approx(0.0, abs=1e-10), key
    assert out["ncc_accuracy"] == 1.0


def test_nc1_matches_pseudo_inverse_formula():
    g = torch.Generator().manual_seed(3)
    means = torch.randn(C, D, generator=g, dtype=torch.float64)
    H, y = samples(means, PER, noise=0.7, seed=4)
    H = H[3:]  # unbalanced classes
    y = y[3:]
    out = collapse_metrics(H, y)
    assert out["nc1"] == pytest.approx(brute_force_nc1(H.numpy(), y.numpy()), rel=1e-8)
    assert out["nc1"] > 0.01
    # collapse progresses -> NC1 falls quadratically with the noise
    assert collapse_metrics(*samples(means, PER, noise=0.07, seed=4))["nc1"] < out["nc1"] / 50


def test_nc1_when_features_wider_than_classes_and_labels_not_contiguous():
    means = simplex_etf(3, 40, seed=1)
    H, y = samples(means, 10, noise=0.1, seed=2)
    y_sparse = torch.tensor([2, 7, 11])[y]
    out = collapse_metrics(H.numpy(), y_sparse.numpy())
    assert out["nc1"] == pytest.approx(brute_force_nc1(H.numpy(), y_sparse.numpy()), rel=1e-8)
    assert math.isnan(out["nc3"]) and math.isnan(out["nc4"])


def test_nc2_detects_departure_from_etf():
    etf = simplex_etf(C, D)
    out = collapse_metrics(*samples(etf, PER, noise=0.0))
    assert out["nc2_equiangular"] < 1e-10 and out["nc2_maxangle"] < 1e-10 and out["nc2_equinorm"] < 1e-10

    stretched = etf.clone()
    stretched[0] *= 2.0  # unequal norms and angles
    out = collapse_metrics(*samples(stretched, PER, noise=0.0))
    assert out["nc2_equinorm"] > 0.1 and out["nc2_equiangular"] > 0.01 and out["nc2_maxangle"] > 0.01

    # Cross-polytope means ±p_c (orthonormal p_c): equal norms and zero global mean, but not a simplex ETF.
    g = torch.Generator().manual_seed(0)
    P = torch.linalg.qr(torch.randn(D, C, generator=g, dtype=torch.float64)).Q.T  # [C, D] orthonormal rows
    H = torch.cat([P, -P])  # 2C classes, global mean zero, means ±p_c
    y = torch.arange(2 * C)
    out = collapse_metrics(H, y)
    cos_expected = np.array([0.0] * (2 * C - 2) + [-1.0])  # each mean: 2C-2 orthogonal, 1 antipodal
    expected_maxangle = np.abs(cos_expected + 1.0 / (2 * C - 1)).mean()
    assert out["nc2_maxangle"] == pytest.approx(expected_maxangle, rel=1e-10)
    assert out["nc2_equinorm"] == pytest.approx(0.0, abs=1e-12)


def test_nc3_and_nc4_against_known_classifiers():
    means = simplex_etf(C, D, scale=2.0)
    H, y = samples(means, PER, noise=0.05, seed=7)
    g = torch.Generator().manual_seed(8)
    W_rand = torch.randn(C, D, generator=g, dtype=torch.float64)
    out = collapse_metrics(H, y, classifier_weight=W_rand)
    Mc = H.reshape(C, PER, D).mean(1) - H.mean(0)
    expected = ((W_rand / W_rand.norm() - Mc / Mc.norm()) ** 2).sum().item()
    assert out["nc3"] == pytest.approx(expected, rel=1e-10)
    assert out["nc3_frobenius"] == pytest.approx(math.sqrt(expected), rel=1e-10)
    assert out["nc3"] > 0.5
    assert collapse_metrics(H, y, classifier_weight=5 * Mc)["nc3"] == pytest.approx(0.0, abs=1e-12)

    # NC4 with given predictions: flip exactly 10 of 100 to a wrong class.
    pred = y.clone()
    pred[::10] = (pred[::10] + 1) % C
    assert collapse_metrics(H, y, predictions=pred)["nc4"] == pytest.approx(0.1)
    # From the classifier: an ETF-aligned classifier agrees with NCC; a random one does not.
    assert collapse_metrics(H, y, classifier_weight=means)["nc4"] == 0.0
    assert collapse_metrics(H, y, classifier_weight=W_rand)["nc4"] > 0.2


def test_validation():
    H, y = samples(simplex_etf(C, D), PER, noise=0.1)
    with pytest.raises(ValueError, match="two classes"):
        collapse_metrics(H, torch.zeros(len(H), dtype=torch.long))
    with pytest.raises(ValueError):
        collapse_metrics(H, y[:-1])
    with pytest.raises(ValueError):
        collapse_metrics(H, y, classifier_weight=torch.zeros(C, D + 1))
    with pytest.raises(ValueError):
        collapse_metrics(H, y, predictions=y[:-1])


def test_collapse_by_layer_tracks_progressive_collapse():
    means = simplex_etf(C, D, scale=2.0)
    layers = [samples(means, PER, noise=s, seed=1)[0] for s in (1.0, 0.3, 0.1, 0.01)]
    y = samples(means, PER, noise=0.0)[1]
    layers[0] = layers[0][:, :10]  # widths may differ between layers
    out = collapse_by_layer(layers, y, classifier_weight=means)
    assert set(out) == set(collapse_metrics(layers[-1], y))
    assert all(v.shape == (4,) and v.dtype == np.float64 for v in out.values())
    assert np.all(np.diff(out["nc1"]) < 0)
    assert np.isnan(out["nc3"][:-1]).all() and out["nc3"][-1] < 1e-3
    assert out["nc1"][-1] == pytest.approx(collapse_metrics(layers[-1], y)["nc1"])
    assert np.isfinite(out["nc4"]).all() and out["nc4"][-1] == 0.0  # same predictions reused at every layer
    with pytest.raises(ValueError):
        collapse_by_layer([], y)
