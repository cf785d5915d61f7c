import pytest
import torch

from lab.analysis.similarity import layer_distances, linear_cka


def test_distances_are_euclidean():
    feats = torch.randn(4, 30, 5)
    d = layer_distances(feats)
    assert d.shape == (4, 4) and torch.allclose(d.diagonal(), torch.zeros(4), atol=1e-4)
    assert d[1, 3].item() == pytest.approx((feats[1] - feats[3]).norm().item(), rel=1e-5)
    assert torch.allclose(d, d.T)


def test_cka_invariances_and_reference_formula():
    torch.manual_seed(0)
    x = torch.randn(200, 6, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    rotated, scaled, other = x @ q, 3.0 * x + 1.0, torch.randn(200, 6, dtype=torch.float64)
    cka = linear_cka(torch.stack([x, rotated, scaled, other]))
    assert cka[0, 1].item() == pytest.approx(1.0, abs=1e-5)
    assert cka[0, 2].item() == pytest.approx(1.0, abs=1e-5)
    assert cka[0, 3].item() < 0.3

    def reference(a, b):  # Kornblith et al. 2019, Eq. via centred Gram matrices
        a, b = a - a.mean(0), b - b.mean(0)
        ka, kb = a @ a.T, b @ b.T
        return ((ka * kb).sum() / (ka.norm() * kb.norm())).item()

    assert cka[0, 3].item() == pytest.approx(reference(x, other), rel=1e-4)


def test_constant_layer_has_zero_cka_and_list_input():
    feats = [torch.randn(10, 3), torch.ones(10, 3)]
    cka = linear_cka(feats)
    assert cka[0, 1] == 0 and cka[1, 1] == 1
    with pytest.raises(ValueError, match=r"\[L, N, D\]"):
        layer_distances(torch.randn(3, 4))
