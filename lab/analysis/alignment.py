"""Residual Alignment measurements on residual Jacobians: RA2 alignment matrices, RA3/RA4 singular values.

The properties are those of *Residual Alignment: Uncovering the Mechanisms of Residual Networks*; RA1, on the
trajectories of the representations, is in :mod:`lab.analysis.trajectories` (its functions are re-exported here).

Inputs are residual Jacobians J_i = ∂F_i/∂h_i [D, D] (skip excluded; see :mod:`lab.analysis.jacobian`), either
dense — a stacked tensor [L, D, D] — or, for large D, matrix-free :class:`~lab.analysis.svd.LinearOperator` objects
together with their truncated SVDs (U [D, r], S [r], V [D, r]) from :func:`~lab.analysis.svd.randomized_svd`. Every
function that needs an SVD accepts such precomputed triplets (``svd=`` / ``svds=``), so each block is decomposed
once.

RA2 is read off the alignment matrix U_{j,K}ᵀ J_i V_{j,K} [K, K]: if the top singular vectors of J_j diagonalise
J_i the matrix is diagonal. :func:`alignment_score` condenses it to the fraction of Frobenius energy on the diagonal
and :func:`random_baseline` gives the same score for Haar-random bases, to be reported beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from lab.analysis.svd import LinearOperator, as_operator, randomized_svd
from lab.analysis.trajectories import project_trajectories, trajectory_stats  # RA1, re-exported from here too

__all__ = [
    "alignment_grid",
    "alignment_matrix",
    "alignment_score",
    "alignment_scores",
    "haar_bases",
    "inverse_sigma_fit",
    "jacobian_svds",
    "project_trajectories",
    "random_baseline",
    "top_singular_values",
    "trajectory_stats",
]

SVDTriplet = tuple[Tensor, Tensor, Tensor]  # U [m, r], S [r], V [n, r]; r >= k, S descending
Jacobians = Tensor | Sequence[Tensor | LinearOperator]  # [L, m, n] stacked, or L matrices / operators
Variant = Literal["UJV", "VJU"]


def jacobian_svds(
    jacobians: Jacobians, k: int, *, iters: int = 20, oversample: int = 10, seed: int = 0
) -> list[SVDTriplet]:
    """Top-k SVD of every block, computed once: exact for dense matrices, randomized for operators.

    Args:
        jacobians: stacked Jacobians [L, m, n] or a sequence of L matrices / operators.
        k: number of triplets kept.
        iters: subspace iterations for operators (the paper uses 20).
        oversample: extra sketch columns for operators.
        seed: seed of the randomized SVD.

    Returns:
        L triplets (U [m, k], S [k], V [n, k]) with S descending.
    """
    if isinstance(jacobians, Tensor):
        if jacobians.ndim != 3:
            raise ValueError(f"stacked jacobians must be [L, m, n], got {tuple(jacobians.shape)}")
        U, S, Vh = torch.linalg.svd(jacobians, full_matrices=False)  # batched, one call
        # clones: slices would keep every block's full D × D factors alive
        return [(U[i, :, :k].clone(), S[i, :k].clone(), Vh[i, :k].mT.clone()) for i in range(len(jacobians))]
    out = []
    for J in jacobians:
        if isinstance(J, LinearOperator):
            out.append(randomized_svd(J, k, iters=iters, oversample=oversample, seed=seed))
        else:
            U, S, Vh = torch.linalg.svd(J, full_matrices=False)
            out.append((U[:, :k].clone(), S[:k].clone(), Vh[:k].mT.clone()))
    return out


def _bases(svd: SVDTriplet, k: int, variant: Variant) -> tuple[Tensor, Tensor]:
    """(left, right) bases for the variant: UJV -> (U_k, V_k); VJU -> (V_k, U_k)."""
    U, _, V = svd
    if U.shape[1] < k or V.shape[1] < k:
        raise ValueError(f"precomputed SVD has {U.shape[1]} vectors, fewer than k={k}")
    if variant == "UJV":
        return U[:, :k], V[:, :k]
    if variant == "VJU":
        return V[:, :k], U[:, :k]
    raise ValueError(f"variant must be 'UJV' or 'VJU', got {variant!r}")


def alignment_matrix(
    J_i: Tensor | LinearOperator,
    J_j: Tensor | LinearOperator | None,
    k: int,
    *,
    variant: Variant = "UJV",
    svd: SVDTriplet | None = None,
) -> Tensor:
    """Alignment matrix of J_i in the top-k singular bases of J_j (the paper's Fig. 2, App. C.2/C.3).

    ``"UJV"`` gives U_{j,k}ᵀ J_i V_{j,k}; ``"VJU"`` gives V_{j,k}ᵀ J_i U_{j,k} (needs square J). For i = j and
    ``"UJV"`` this is diag(σ_1, …, σ_k) of J_j; a near-diagonal matrix for i ≠ j is RA2.

    Args:
        J_i: Jacobian [m, n] (dense or operator) being examined.
        J_j: Jacobian whose singular vectors form the basis; may be None when ``svd`` is given.
        k: number of singular vectors.
        variant: which pairing of left/right singular vectors to use.
        svd: precomputed (U, S, V) of J_j with at least k columns (e.g. from :func:`randomized_svd`).

    Returns:
        Alignment matrix [k, k].
    """
    if svd is None:
        if J_j is None:
            raise ValueError("pass J_j or its precomputed svd")
        svd = jacobian_svds([J_j], k)[0]
    left, right = _bases(svd, k, variant)
    op = as_operator(J_i)
    if right.shape[0] != op.shape[1] or left.shape[0] != op.shape[0]:
        raise ValueError(
            f"{variant} needs bases of sizes ({op.shape[0]}, {op.shape[1]}), got ({left.shape[0]}, {right.shape[0]})"
        )
    return left.mT @ op.matmat(right.to(op.dtype)).to(left.dtype)


def alignment_grid(
    jacobians: Jacobians, k: int, *, variant: Variant = "UJV", svds: Sequence[SVDTriplet] | None = None
) -> Tensor:
    """All pairwise alignment matrices: grid[i, j] = U_{j,k}ᵀ J_i V_{j,k} (row i = Jacobian, column j = basis).

    Each block's SVD is computed once (or taken from ``svds``), and each J_i is applied once to the stacked bases of
    all blocks [n, L·k], so an operator is called L times in total.

    Args:
        jacobians: stacked Jacobians [L, m, n] or a sequence of L matrices / operators.
        k: number of singular vectors.
        variant: ``"UJV"`` or ``"VJU"`` (see :func:`alignment_matrix`).
        svds: precomputed L triplets (U, S, V), e.g. randomized SVDs of operators.

    Returns:
        Grid [L, L, k, k].
    """
    Js = list(jacobians)
    L = len(Js)
    if svds is None:
        svds = jacobian_svds(jacobians, k)
    if len(svds) != L:
        raise ValueError(f"got {len(svds)} SVDs for {L} Jacobians")
    pairs = [_bases(s, k, variant) for s in svds]
    left = torch.stack([p[0] for p in pairs])  # [L, m, k]
    right = torch.cat([p[1] for p in pairs], dim=1)  # [n, L*k]
    rows = []
    for J in Js:
        op = as_operator(J)
        P = op.matmat(right.to(op.dtype)).to(left.dtype).reshape(op.shape[0], L, k)  # [m, L, k]: J_i V_j for all j
        rows.append(torch.einsum("jmk,mjl->jkl", left, P))  # [L(j), k, k]
    return torch.stack(rows)


def alignment_score(A: Tensor) -> Tensor:
    """Fraction of an alignment matrix's Frobenius energy on its diagonal: Σ_r A_rr² / Σ_rs A_rs².

    1 when A is diagonal (e.g. J_j against its own singular vectors), about 1/k for unrelated bases (see
    :func:`random_baseline`); sign-blind, so anti-aligned directions count as aligned. Trivially 1 for k = 1.

    Args:
        A: alignment matrix [..., k, k].

    Returns:
        Score [...] in [0, 1]; NaN where A is all zeros.
    """
    diag = (A.diagonal(dim1=-2, dim2=-1) ** 2).sum(dim=-1)
    total = (A**2).sum(dim=(-2, -1))
    return torch.where(
        total > 0, diag / torch.where(total > 0, total, torch.ones_like(total)), torch.full_like(total, float("nan"))
    )


def alignment_scores(grid: Tensor) -> Tensor:
    """:func:`alignment_score` of every block of an alignment grid.

    Args:
        grid: alignment grid [L, L, k, k] from :func:`alignment_grid`.

    Returns:
        Scores [L, L]; the diagonal is 1 for the ``"UJV"`` variant.
    """
    if grid.ndim != 4:
        raise ValueError(f"grid must be [L, L, k, k], got {tuple(grid.shape)}")
    return alignment_score(grid)


def haar_bases(m: int, n: int, k: int, trials: int, *, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Haar-random orthonormal bases for ``trials`` alignment matrices of an [m, n] Jacobian.

    Q factors of Gaussian matrices with the signs of diag(R) folded in (the Haar measure), drawn in float64 on the
    CPU from one generator seeded with ``seed``: all U first, then all V, so a seed fixes every pair.

    Returns:
        U ``[trials, m, k]`` and V ``[trials, n, k]``, float64 on the CPU.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def haar(rows: int) -> Tensor:  # [trials, rows, k]
        Q, R = torch.linalg.qr(torch.randn(trials, rows, k, generator=gen, dtype=torch.float64))
        return Q * torch.sign(R.diagonal(dim1=-2, dim2=-1)).unsqueeze(-2)

    return haar(m), haar(n)


def random_baseline(J_i: Tensor | LinearOperator, k: int, *, trials: int = 100, seed: int = 0) -> dict[str, float]:
    """Alignment score of J_i in Haar-random orthonormal bases: the chance level for :func:`alignment_score`.

    U [m, k] and V [n, k] come from :func:`haar_bases` (Haar measure, seeded). Report mean ± std beside every
    alignment score.

    Args:
        J_i: Jacobian [m, n], dense or operator.
        k: basis size, as in the score it accompanies.
        trials: number of random basis pairs.
        seed: generator seed.

    Returns:
        ``{"mean", "std", "trials"}``; std is the sample std over trials.
    """
    op = as_operator(J_i)
    m, n = op.shape
    if not 1 <= k <= min(m, n) or trials < 1:
        raise ValueError(f"need 1 <= k <= {min(m, n)} and trials >= 1, got k={k}, trials={trials}")
    work = op.dtype if op.dtype in (torch.float32, torch.float64) else torch.float32
    U, V = (basis.to(op.device, work) for basis in haar_bases(m, n, k, trials, seed=seed))
    JV = op.matmat(V.permute(1, 0, 2).reshape(n, trials * k).to(op.dtype)).to(work)  # one call, all trials
    A = U.mT @ JV.reshape(m, trials, k).permute(1, 0, 2)  # [trials, k, k]
    scores = alignment_score(A).double()
    std = scores.std().item() if trials > 1 else 0.0
    return {"mean": scores.mean().item(), "std": std, "trials": trials}


def top_singular_values(jacobians: Jacobians, k: int, *, svds: Sequence[SVDTriplet] | None = None) -> Tensor:
    """Top-k singular values per block (RA3: a sharp drop after C values in fully connected ResNets).

    Args:
        jacobians: stacked Jacobians [L, m, n] or a sequence of matrices / operators (ignored if ``svds`` given).
        k: number of values per block.
        svds: precomputed L triplets (U, S, V).

    Returns:
        Singular values [L, k], descending along k.
    """
    if svds is None:
        if isinstance(jacobians, Tensor):
            return torch.linalg.svdvals(jacobians)[:, :k]
        svds = jacobian_svds(jacobians, k)
    if any(len(s[1]) < k for s in svds):
        raise ValueError(f"precomputed SVDs have fewer than k={k} values")
    return torch.stack([s[1][:k] for s in svds])


def inverse_sigma_fit(sigma1: Tensor | np.ndarray | Sequence[float], start: int = 0, stop: int | None = None) -> dict:
    """RA4: least-squares line through 1/σ₁ against the 1-based block index i.

    Under RA4 σ₁(J_i) ≈ 1/i after RA begins, i.e. slope ≈ 1 (the paper's Fig. 4b: 0.992 after block 5).

    Args:
        sigma1: top singular value of each block [L].
        start: 0-based position of the first block included in the fit (e.g. 4 to fit from block 5).
        stop: 0-based position after the last block fitted (default L: to the last block). A conv network's fit
            stays within one stage: its blocks' Jacobians act on one space.

    Returns:
        ``slope``, ``intercept``, ``r2`` (floats; r2 is NaN if 1/σ₁ is constant over the fit), ``index`` [L]
        (1-based block numbers), ``inv_sigma`` [L] and the fitted line ``fit`` [L], arrays as float64 numpy.
    """
    s = torch.as_tensor(sigma1).detach().cpu().double().numpy()
    L = len(s)
    stop = L if stop is None else stop
    if s.ndim != 1 or not 0 <= start <= stop - 2 or stop > L:
        raise ValueError(f"need sigma1 [L] and at least two blocks from start={start} to stop={stop}, got shape "
                         f"{s.shape}")
    if not np.all(s[start:stop] > 0):
        raise ValueError("sigma1 must be positive over the fitted blocks")
    index = np.arange(1, L + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        inv = 1.0 / s
    x, y = index[start:stop], inv[start:stop]
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc**2).sum())
    intercept = float(y.mean() - slope * x.mean())
    ss_res = float(((y - (slope * x + intercept)) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return {
        "slope": slope,
        "intercept": intercept,
        "r2": r2,
        "index": index,
        "inv_sigma": inv,
        "fit": slope * index + intercept,
    }
