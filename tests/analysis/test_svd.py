"""Randomized and block Krylov SVDs against the exact SVD of matrices with a known spectrum."""

import pytest
import torch

from lab.analysis.svd import LinearOperator, as_operator, block_krylov_svd, randomized_svd


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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


def test_block_krylov_matches_exact_svd_on_stacks_operators_and_wide_matrices():
    s = SPECTRA["harmonic"](80)
    stack = torch.stack([torch.stack([(lambda q: (q[0] * q[1]) @ q[2].T)(known_matrix(90, 80, s, seed=3 * i + j))
                                      for j in range(3)]) for i in range(2)])  # [2, 3, 90, 80]
    k = 6
    res = block_krylov_svd(stack, k, block=4)
    assert res.U.shape == (2, 3, 90, k) and res.S.shape == (2, 3, k) and res.V.shape == (2, 3, 80, k)
    torch.testing.assert_close(res.S, torch.linalg.svdvals(stack)[..., :k], rtol=1e-6, atol=0)
    eye = torch.eye(k, dtype=torch.float64).expand(2, 3, k, k)
    torch.testing.assert_close(res.U.mT @ res.U, eye, atol=1e-10, rtol=0)
    torch.testing.assert_close(res.V.mT @ res.V, eye, atol=1e-10, rtol=0)
    torch.testing.assert_close(stack @ res.V, res.U * res.S[..., None, :], atol=1e-10, rtol=0)  # A v = σ u
    assert res.residual.max() <= 1e-3 and k <= res.dim <= 80

    Q1, s, Q2 = known_matrix(60, 150, SPECTRA["geometric"](60))  # wide: the space is built on the 60 side
    op, calls = counting_operator(Q1, s, Q2)
    U, S, V, dim, _ = block_krylov_svd(op, 5)
    torch.testing.assert_close(S, s[:5], rtol=1e-6, atol=0)
    assert sin_max_angle(U, Q1[:, :5]) < 1e-4 and sin_max_angle(V, Q2[:, :5]) < 1e-4
    assert calls["matmat"] > 0 and calls["rmatmat"] > 0 and dim % 8 == 0


def test_block_krylov_is_accurate_on_a_flat_spectrum_where_subspace_iteration_is_not():
    """A Gaussian matrix: neighbouring top singular values a few % apart, like an untrained network's Jacobian."""
    A = torch.randn(400, 400, generator=gen(0), dtype=torch.float64) / 20
    k = 20
    exact = torch.linalg.svdvals(A)[:k]
    res = block_krylov_svd(A, k, tol=1e-3)
    assert ((res.S - exact).abs() / exact).max() < 1e-6
    assert res.dim < 400, "converged before the space was the whole domain"
    assert ((randomized_svd(A, k, iters=4)[1] - exact).abs() / exact).max() > 1e-3
    loose = block_krylov_svd(A, k, tol=0.5)  # a loose tolerance stops early, and its residual says so
    assert loose.dim < res.dim and loose.residual.max() > res.residual.max()


def test_block_krylov_exact_when_the_space_fills_the_domain():
    """A tolerance no float64 residual meets: the space grows to all 27 directions, the last block partial."""
    Q1, s, Q2 = known_matrix(30, 27, SPECTRA["geometric"](27))
    res = block_krylov_svd((Q1 * s) @ Q2.T, 5, block=8, tol=1e-300)
    assert res.dim == 27
    torch.testing.assert_close(res.S, s[:5], rtol=1e-12, atol=0)


def test_block_krylov_rank_deficient_and_k_above_rank():
    Q1, s, Q2 = known_matrix(50, 40, torch.tensor([3.0, 2.0, 1.0, 0.5, 0.25], dtype=torch.float64))
    A = (Q1 * s) @ Q2.T  # rank 5: the Krylov space breaks down after 5 directions
    U, S, V, _, _ = block_krylov_svd(A, 3, block=2)
    torch.testing.assert_close(S, s[:3], rtol=1e-10, atol=0)
    U, S, V, _, _ = block_krylov_svd(A, 8, block=4)
    torch.testing.assert_close(S[:5], s, rtol=1e-10, atol=0)
    assert S[5:].abs().max() < 1e-7  # σ = √θ: zeros come out at √(round-off) · σ_1
    torch.testing.assert_close(U.T @ U, torch.eye(8, dtype=torch.float64), atol=1e-8, rtol=0)
    torch.testing.assert_close(V.T @ V, torch.eye(8, dtype=torch.float64), atol=1e-8, rtol=0)


def test_block_krylov_seeded_signs_dim_reuse_dtype_and_validation():
    Q1, s, Q2 = known_matrix(70, 60, SPECTRA["harmonic"](60))
    A = (Q1 * s) @ Q2.T
    first = block_krylov_svd(A, 6, seed=1)
    again = block_krylov_svd(A, 6, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(first[:3], again[:3], strict=True))
    assert torch.all(first.U.gather(0, first.U.abs().argmax(0, keepdim=True)) > 0)
    reused = block_krylov_svd(A, 6, dim=first.dim, seed=2)
    assert reused.dim == first.dim
    torch.testing.assert_close(reused.U, first.U, atol=1e-4, rtol=0)  # another start, converged as far
    single = block_krylov_svd(A.float(), 4)
    assert single.U.dtype == single.S.dtype == torch.float32
    torch.testing.assert_close(single.S, s[:4].float(), rtol=1e-4, atol=0)
    for bad in (0, 61):
        with pytest.raises(ValueError, match="k must satisfy"):
            block_krylov_svd(A, bad)
    with pytest.raises(ValueError):
        block_krylov_svd(A, 2, block=0)
    with pytest.raises(ValueError):
        block_krylov_svd(A[0], 1)
