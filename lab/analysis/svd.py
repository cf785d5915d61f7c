"""Randomized truncated SVD for dense matrices and matrix-free operators.

Residual Jacobians of convolutional blocks are too large to form (*Residual Alignment: Uncovering the Mechanisms
of Residual Networks* §2.4: 16384 × 16384 for 64 channels on 16 × 16), yet only their top-K singular triplets matter
for RA2–RA4. That paper uses Algorithm 971 of Li, Kluger & Tygert (2017): subspace iteration in which every product
with A or Aᵀ is re-orthonormalised, then a small dense SVD. This module implements that scheme over a
:class:`LinearOperator`, so a Jacobian can be supplied as a pair of jvp / vjp closures and is never materialised.
Cost: O(T·K·cost(A·x) + T·D·K²) instead of O(D³).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["LinearOperator", "as_operator", "randomized_svd"]


@dataclass(frozen=True)
class LinearOperator:
    """A matrix A [m, n] known only through its products with blocks of vectors.

    Attributes:
        shape: (m, n).
        matmat: X [n, k] ↦ A @ X [m, k].
        rmatmat: Y [m, k] ↦ Aᵀ @ Y [n, k]. For a Jacobian this is a batched vjp.
        dtype: the dtype the closures expect their inputs in (and return).
        device: the device the closures expect their inputs on.
    """

    shape: tuple[int, int]
    matmat: Callable[[Tensor], Tensor]
    rmatmat: Callable[[Tensor], Tensor]
    dtype: torch.dtype = torch.float32
    device: torch.device = torch.device("cpu")


def as_operator(A: Tensor | LinearOperator) -> LinearOperator:
    """Wrap a dense matrix as a :class:`LinearOperator` (an operator is returned unchanged).

    Args:
        A: dense matrix [m, n].

    Returns:
        An operator whose products are ``A @ X`` and ``A.mT @ Y``.
    """
    if isinstance(A, LinearOperator):
        return A
    if not isinstance(A, Tensor) or A.ndim != 2:
        raise ValueError(
            f"expected a 2-D tensor or a LinearOperator, got {type(A).__name__} with shape {getattr(A, 'shape', None)}"
        )
    return LinearOperator(
        shape=(A.shape[0], A.shape[1]),
        matmat=lambda X: A @ X,
        rmatmat=lambda Y: A.mT @ Y,
        dtype=A.dtype,
        device=A.device,
    )


def _orth(X: Tensor) -> Tensor:
    """Orthonormal basis [m, k] of the columns of X [m, k] (reduced QR)."""
    return torch.linalg.qr(X, mode="reduced").Q


def randomized_svd(
    A: Tensor | LinearOperator, k: int, *, iters: int = 20, oversample: int = 10, seed: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """Top-k singular triplets of A by randomized subspace iteration.

    Draws a Gaussian test matrix Ω [n, l] (l = k + oversample, capped at min(m, n)), forms Q = orth(A Ω), then runs
    ``iters`` rounds of Q ← orth(A · orth(Aᵀ Q)), re-orthonormalising by QR after *every* product so the small
    singular directions are not lost to round-off (the role Algorithm 971 of Li et al. 2017 plays in the Residual
    Alignment paper, §2.4, with T = 20 and K = 10–30). Finally B = Qᵀ A [l, n] is decomposed densely. The error in
    σ_i decays like (σ_{l+1}/σ_i)^(2·iters+1), so a gap below σ_k makes the top k essentially exact.

    Ω is drawn on the CPU in float64 from a ``torch.Generator`` seeded with ``seed`` and then moved, so a given seed
    gives the same start on every device. Computation uses A's device and dtype (float16 / bfloat16 are promoted to
    float32 because QR needs it; the result is returned in that working dtype).

    Singular vectors are made sign-deterministic: each column of U is flipped so that its largest-magnitude entry is
    positive (V flipped with it), which keeps A ≈ U diag(S) Vᵀ.

    Args:
        A: dense matrix [m, n] or a :class:`LinearOperator` of that shape.
        k: number of singular triplets, 1 ≤ k ≤ min(m, n).
        iters: power (subspace) iterations T; 0 gives the plain range finder.
        oversample: extra columns carried along to speed convergence of the k-th triplet.
        seed: seed of the Gaussian start.

    Returns:
        U [m, k] and V [n, k] with orthonormal columns, S [k] descending, with A ≈ U diag(S) Vᵀ.

    Raises:
        ValueError: if k < 1, k > min(m, n), iters < 0 or oversample < 0.
    """
    op = as_operator(A)
    m, n = op.shape
    if not 1 <= k <= min(m, n):
        raise ValueError(f"k must satisfy 1 <= k <= min(m, n) = {min(m, n)} for a {m}x{n} matrix, got k={k}")
    if iters < 0 or oversample < 0:
        raise ValueError(f"iters and oversample must be >= 0, got iters={iters}, oversample={oversample}")
    work = op.dtype if op.dtype in (torch.float32, torch.float64) else torch.float32
    width = min(k + oversample, m, n)  # l in the literature: sketch width

    def mat(X: Tensor) -> Tensor:  # A @ X in the working dtype
        return op.matmat(X.to(op.dtype)).to(work)

    def rmat(Y: Tensor) -> Tensor:  # Aᵀ @ Y in the working dtype
        return op.rmatmat(Y.to(op.dtype)).to(work)

    gen = torch.Generator(device="cpu").manual_seed(seed)
    omega = torch.randn(n, width, generator=gen, dtype=torch.float64).to(device=op.device, dtype=work)
    Q = _orth(mat(omega))  # [m, width]: basis of the sampled range
    for _ in range(iters):
        Q = _orth(mat(_orth(rmat(Q))))  # one round of (A Aᵀ) with QR after each product
    Bt = rmat(Q)  # [n, width] = (Qᵀ A)ᵀ
    Ub, S, Vbh = torch.linalg.svd(Bt.mT, full_matrices=False)  # Qᵀ A = Ub diag(S) Vbh
    U = Q @ Ub[:, :k]
    V = Vbh[:k].mT
    S = S[:k]
    # Deterministic signs: largest-|.| entry of each left singular vector is positive.
    idx = U.abs().argmax(dim=0)
    signs = torch.sign(U.gather(0, idx[None]).squeeze(0))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return U * signs, S, V * signs
