"""Effective rank of matrices and of feature sets (Roy & Vetterli 2007).

As used in §6 of *Residual Connections Harm Generative Representation Learning*.

With p_i = σ_i / Σ_j σ_j the normalised singular values, the *spectral entropy* is H = −Σ_i p_i log p_i (natural
log, 0 log 0 = 0) and the *effective rank* is exp(H), a continuous rank between 1 and min(m, n).

Naming trap: that paper's Eq. 6 calls H itself "effective rank" ρ(A) and its figures plot H, not exp(H). Here
``effective_rank`` is always Roy & Vetterli's exp(H) and ``spectral_entropy`` is the number the paper reports;
``feature_rank(..., measure="entropy")`` reproduces its curves.

The zero matrix (Σσ = 0) has no normalised spectrum; by convention both functions return 0 for it (its rank), so
``spectral_entropy == log(effective_rank)`` holds for every non-zero matrix only.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "effective_rank",
    "effective_rank_from_singular_values",
    "feature_rank",
    "spectral_entropy",
    "spectral_entropy_from_singular_values",
]


def _as_tensor(x: Tensor | np.ndarray) -> Tensor:
    t = torch.as_tensor(x)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def spectral_entropy_from_singular_values(s: Tensor | np.ndarray) -> Tensor:
    """Shannon entropy (nats) of the normalised singular values.

    Args:
        s: non-negative singular values [..., r]; any order, zeros allowed (they contribute 0).

    Returns:
        Entropy [...] (a 0-d tensor for one spectrum); 0 for an all-zero spectrum.

    Raises:
        ValueError: if any value is negative or not finite.
    """
    s = _as_tensor(s)
    if not torch.isfinite(s).all() or (s < 0).any():
        raise ValueError("singular values must be finite and non-negative")
    total = s.sum(dim=-1, keepdim=True)
    p = s / torch.where(total > 0, total, torch.ones_like(total))  # zero spectrum -> p = 0 -> H = 0
    return -torch.special.xlogy(p, p).sum(dim=-1)


def effective_rank_from_singular_values(s: Tensor | np.ndarray) -> Tensor:
    """Roy & Vetterli effective rank exp(H) of a spectrum.

    Args:
        s: non-negative singular values [..., r].

    Returns:
        Effective rank [...] in [1, r]; 0 for an all-zero spectrum (the rank of the zero matrix).
    """
    s = _as_tensor(s)
    h = spectral_entropy_from_singular_values(s)
    nonzero = (s > 0).any(dim=-1)
    return torch.where(nonzero, torch.exp(h), torch.zeros_like(h))


def spectral_entropy(M: Tensor | np.ndarray) -> Tensor:
    """Spectral entropy H of M: the quantity Eq. 6 of the decayed-shortcuts paper reports as "effective rank".

    Args:
        M: matrix [m, n] or batch [..., m, n].

    Returns:
        H [...] in nats, between 0 (rank one) and log min(m, n); 0 for the zero matrix.
    """
    return spectral_entropy_from_singular_values(torch.linalg.svdvals(_as_tensor(M)))


def effective_rank(M: Tensor | np.ndarray) -> Tensor:
    """Roy & Vetterli (2007) effective rank exp(H) of M.

    Equals n for the n × n identity, 1 for any rank-one matrix, and min(m, n) for a flat spectrum.

    Args:
        M: matrix [m, n] or batch [..., m, n].

    Returns:
        Effective rank [...] (a 0-d tensor for one matrix, so ``float(...)`` works); 0 for the zero matrix.
    """
    return effective_rank_from_singular_values(torch.linalg.svdvals(_as_tensor(M)))


def feature_rank(
    features: Tensor | np.ndarray,
    *,
    measure: Literal["effective_rank", "entropy"] = "effective_rank",
    center: Literal["sample", "feature", "none"] = "sample",
) -> Tensor:
    """Rank of a feature set through the n × n sample-by-sample covariance, as in the decayed-shortcuts paper §6.

    The paper takes the singular values of A(i, j) = covariance of the features of samples i and j. With X [n, d]
    and rows centred as chosen by ``center``, that matrix is A = X_c X_cᵀ / (d − 1); its singular values are
    σ_i(X_c)² / (d − 1), so they are obtained from the SVD of X_c without forming A (O(n·d·min(n, d))). The
    1 / (d − 1) scale cancels in the normalisation. Note the squares: this differs from ``effective_rank(features)``.

    Args:
        features: features [n, d] (or a batch [..., n, d]), e.g. last-layer class tokens.
        measure: ``"effective_rank"`` for exp(H) (Roy & Vetterli) or ``"entropy"`` for H, the number the paper
            plots as "effective rank".
        center: ``"sample"`` (default) centres each sample's feature vector over its d coordinates, i.e. A is
            ``torch.cov(features)`` with samples as the variables — the literal reading of the paper;
            ``"feature"`` subtracts the mean feature over samples (the usual covariance; the same non-zero spectrum
            as the d × d feature covariance); ``"none"`` uses the raw Gram matrix X Xᵀ.

    Returns:
        The chosen measure [...]; 0 when the centred features are all zero.
    """
    X = _as_tensor(features)
    if X.ndim < 2:
        raise ValueError(f"features must be [..., n, d], got shape {tuple(X.shape)}")
    if center == "sample":
        X = X - X.mean(dim=-1, keepdim=True)
    elif center == "feature":
        X = X - X.mean(dim=-2, keepdim=True)
    elif center != "none":
        raise ValueError(f"center must be 'sample', 'feature' or 'none', got {center!r}")
    s = torch.linalg.svdvals(X) ** 2  # singular values of X_c X_cᵀ (up to the cancelling 1/(d-1))
    if measure == "effective_rank":
        return effective_rank_from_singular_values(s)
    if measure == "entropy":
        return spectral_entropy_from_singular_values(s)
    raise ValueError(f"measure must be 'effective_rank' or 'entropy', got {measure!r}")
