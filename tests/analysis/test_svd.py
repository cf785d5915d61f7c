"""Randomized SVD against the exact SVD of matrices with a known, decaying spectrum."""

import pytest
import torch

from lab.analysis.svd import LinearOperator, as_operator, randomized_svd


def known_matrix(m: int, n: int, s: torch.Tensor, seed: int = 0):
    """A = Q1 diag(s) Q2ᵀ with Haar-ish orthonormal Q1 [m, r], Q2 [n, r] and r = len(s), in float64."""
    g = torch.Generator().manual_seed(seed)
    Q1 = torch.linalg.qr(torch.randn(m, len(s), generator=g, dtype=torch.float64)).Q
    Q2 = torch.linalg.qr(torch.randn(n, len(s), generator=g, dtype=torch.float64)).Q
    return Q1, s, Q2


def counting_operator(Q1, s, Q2):
    """Operator from closures that never form A; counts calls and checks block shapes."""
    calls = {"matmat": 0, "rmatmat": 0}
    m, n = Q1.shape[0], Q2.shape[0]

    def matmat(X):
        assert X.ndim == 2 and X.shape[0] == n
        calls["matmat"] += 1
        return Q1 @ (s[:, None] * (Q2.T @ X))

    def rmatmat(Y):
        assert Y.ndim == 2 and Y.shape[0] == m
        calls["rmatmat"] += 1
        return Q2 @ (s[:, None] * (Q1.T @ Y))

    return LinearOperator((m, n), matmat, rmatmat, dtype=torch.float64), calls


def sin_max_angle(U: torch.Tensor, U_true: torch.Tensor) -> float:
    """Sine of the largest principal angle between the column spaces of two orthonormal bases."""
    return torch.linalg.matrix_norm(U_true - U @ (U.T @ U_true), ord=2).item()


SPECTRA = {
    "geometric": lambda r: 0.85 ** torch.arange(r, dtype=torch.float64),
    "harmonic": lambda r: 1.0 / torch.arange(1, r + 1, dtype=torch.float64),
}


@pytest.mark.parametrize("spectrum", sorted(SPECTRA))
@pytest.mark.parametrize("shape", [(120, 80), (80, 120), (100, 100)])
@pytest.mark.parametrize("kind", ["dense", "operator"])
def test_matches_exact_svd(spectrum, shape, kind):
    m, n = shape
    k = 10
    Q1, s, Q2 = known_matrix(m, n, SPECTRA[spectrum](min(m, n)))
    A = (Q1 * s) @ Q2.T
    src = A if kind == "dense" else counting_operator(Q1, s, Q2)[0]
    U, S, V = randomized_svd(src, k)

    assert U.shape == (m, k) and S.shape == (k,) and V.shape == (n, k)
    assert ((S - s[:k]).abs() / s[:k]).max() <= 1e-4
    # Agrees with torch.linalg.svd, not only with the construction.
    S_ref = torch.linalg.svdvals(A)[:k]
    torch.testing.assert_close(S, S_ref, rtol=1e-4, atol=0)
    assert torch.all(S[:-1] >= S[1:])
    eye = torch.eye(k, dtype=torch.float64)
    torch.testing.assert_close(U.T @ U, eye, atol=1e-10, rtol=0)
    torch.testing.assert_close(V.T @ V, eye, atol=1e-10, rtol=0)
    assert sin_max_angle(U, Q1[:, :k]) < 1e-4
    assert sin_max_angle(V, Q2[:, :k]) < 1e-4
    # U diag(S) Vᵀ is the best rank-k approximation.
    best = (Q1[:, :k] * s[:k]) @ Q2[:, :k].T
    assert torch.linalg.matrix_norm(U @ torch.diag(S) @ V.T - best, ord=2) < 1e-4 * s[0]


def test_operator_is_called_once_per_product():
    Q1, s, Q2 = known_matrix(60, 50, SPECTRA["geometric"](50))
    op, calls = counting_operator(Q1, s, Q2)
    randomized_svd(op, 5, iters=7)
    # Range finder (1 matmat), 7 rounds of (rmatmat, matmat), final projection (1 rmatmat).
    assert calls == {"matmat": 8, "rmatmat": 8}


def test_power_iterations_matter_on_a_slow_spectrum():
    Q1, s, Q2 = known_matrix(200, 200, 1.0 / torch.arange(1, 201, dtype=torch.float64) ** 0.5)
    A = (Q1 * s) @ Q2.T
    err = {t: ((randomized_svd(A, 10, iters=t, oversample=2)[1] - s[:10]).abs() / s[:10]).max().item() for t in (0, 20)}
    assert err[20] < 1e-3 < err[0]


def test_seeded_and_sign_deterministic():
    Q1, s, Q2 = known_matrix(70, 40, SPECTRA["geometric"](40))
    A = (Q1 * s) @ Q2.T
    U1, S1, V1 = randomized_svd(A, 6, seed=3)
    U2, S2, V2 = randomized_svd(A, 6, seed=3)
    assert torch.equal(U1, U2) and torch.equal(S1, S2) and torch.equal(V1, V2)
    U3, _, V3 = randomized_svd(A, 6, seed=4)  # different start, same (sign-fixed) answer
    torch.testing.assert_close(U3, U1, atol=1e-8, rtol=0)
    torch.testing.assert_close(V3, V1, atol=1e-8, rtol=0)
    assert torch.all(U1.gather(0, U1.abs().argmax(0, keepdim=True)) > 0)


def test_float32_input_stays_float32():
    Q1, s, Q2 = known_matrix(64, 48, SPECTRA["geometric"](48))
    A = ((Q1 * s) @ Q2.T).float()
    U, S, V = randomized_svd(A, 4)
    assert U.dtype == S.dtype == V.dtype == torch.float32
    torch.testing.assert_close(S, s[:4].float(), rtol=1e-4, atol=1e-6)


def test_k_equal_min_dimension_and_validation():
    Q1, s, Q2 = known_matrix(30, 8, SPECTRA["geometric"](8))
    A = (Q1 * s) @ Q2.T
    torch.testing.assert_close(randomized_svd(A, 8)[1], s, rtol=1e-10, atol=1e-12)
    for bad in (0, 9, -1):
        with pytest.raises(ValueError, match="k must satisfy"):
            randomized_svd(A, bad)
    with pytest.raises(ValueError):
        randomized_svd(A, 2, iters=-1)
    with pytest.raises(ValueError):
        as_operator(torch.zeros(3))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    Q1, s, Q2 = known_matrix(300, 200, SPECTRA["harmonic"](200))
    A = (Q1 * s) @ Q2.T
    U, S, V = randomized_svd(A.cuda(), 10)
    assert U.device.type == "cuda"
    Uc, Sc, Vc = randomized_svd(A, 10)
    torch.testing.assert_close(S.cpu(), Sc, rtol=1e-8, atol=0)
    torch.testing.assert_close(U.cpu(), Uc, atol=1e-6, rtol=0)
