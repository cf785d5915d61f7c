"""Neural-collapse metrics NC1–NC4 (Papyan, Han & Donoho 2020), for the last layer or layer by layer.

Notation (Papyan et al.): N samples h [d] in C classes, global mean μ_G, class means μ_c, centred means
Ṁ = [μ_c − μ_G]_c [C, d]; within-class covariance Σ_W = (1/N) Σ_i (h_i − μ_{y_i})(h_i − μ_{y_i})ᵀ and between-class
covariance Σ_B = (1/C) Σ_c (μ_c − μ_G)(μ_c − μ_G)ᵀ = ṀᵀṀ / C. All four metrics go to 0 under neural collapse:

- ``nc1`` = Tr(Σ_W Σ_B^†) / C: within-class variability relative to the between-class spread.
- ``nc2_equinorm`` = std_c ‖μ_c − μ_G‖ / mean_c ‖μ_c − μ_G‖; ``nc2_equiangular`` = std over c ≠ c′ of
  cos(μ_c − μ_G, μ_c′ − μ_G); ``nc2_maxangle`` = mean over c ≠ c′ of ``|cos + 1/(C − 1)|`` (0 for a simplex ETF).
  Standard deviations are sample std (ddof = 1), like ``torch.std`` in the authors' reference code.
- ``nc3`` = ‖W/‖W‖_F − Ṁ/‖Ṁ‖_F‖²_F, *squared* as in Papyan et al. Fig. 5 and their code; ``nc3_frobenius`` is
  its square root. W [C, d] is the last-layer classifier.
- ``nc4`` = fraction of samples whose nearest-class-centre prediction differs from the given predictions.

Also returned: ``ncc_accuracy`` (NCC prediction vs labels; meaningful at every layer), and when a classifier is
given ``nc2_w_equinorm``, ``nc2_w_equiangular``, ``nc2_w_maxangle`` for its rows. Unavailable metrics are NaN so
every call returns the same keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["collapse_by_layer", "collapse_metrics"]

_NAN = float("nan")


def _t(x: Tensor | np.ndarray) -> Tensor:
    return torch.as_tensor(x)


def _equi_stats(V: Tensor) -> tuple[float, float, float]:
    """Equinorm, equiangularity and max-angle deviation of the rows of V [C, d]."""
    C = V.shape[0]
    norms = V.norm(dim=1)
    equinorm = (norms.std() / norms.mean()).item()
    U = V / norms.clamp_min(torch.finfo(V.dtype).tiny)[:, None]
    off = (U @ U.T)[~torch.eye(C, dtype=torch.bool, device=V.device)]  # C(C-1) cosines
    return equinorm, off.std().item(), (off + 1.0 / (C - 1)).abs().mean().item()


def collapse_metrics(
    features: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    classifier_weight: Tensor | np.ndarray | None = None,
    classifier_bias: Tensor | np.ndarray | None = None,
    predictions: Tensor | np.ndarray | None = None,
) -> dict[str, float]:
    """NC1–NC4 of one layer's features (see the module docstring for the exact formulas).

    Classes are the distinct values in ``labels``; rows of ``classifier_weight`` are indexed by those label values.
    Computed in float64 on the features' device. NC1 avoids the d × d pseudo-inverse: with Ṁ = P diag(s) Qᵀ,
    Σ_B^† = C Σ_r q_r q_rᵀ / s_r² over the non-negligible s_r (relative cut-off max(C, d)·eps, like ``pinv``), so
    Tr(Σ_W Σ_B^†)/C = (1/N) Σ_r ‖(H − μ_y) q_r‖² / s_r², costing O(N·d·C).

    Args:
        features: features [n, d].
        labels: integer class labels [n]; at least two distinct classes.
        classifier_weight: last-layer weight W [C_total, d] (rows = classes), enables ``nc3`` and the ``nc2_w_*``.
        classifier_bias: bias [C_total], used only to compute predictions when ``predictions`` is None.
        predictions: the network's predicted labels [n] for NC4. If None and a classifier is given, predictions are
            argmax(h Wᵀ + b); if neither is given, ``nc4`` is NaN.

    Returns:
        Floats keyed ``nc1, nc2_equinorm, nc2_equiangular, nc2_maxangle, nc3, nc3_frobenius, nc4, ncc_accuracy,
        nc2_w_equinorm, nc2_w_equiangular, nc2_w_maxangle``.
    """
    H = _t(features).to(torch.float64)
    y = _t(labels).to(device=H.device, dtype=torch.long)
    if H.ndim != 2 or y.shape != (H.shape[0],):
        raise ValueError(f"expected features [n, d] and labels [n], got {tuple(H.shape)} and {tuple(y.shape)}")
    classes, y_idx, counts = torch.unique(y, return_inverse=True, return_counts=True)
    C, (N, d) = len(classes), H.shape
    if C < 2:
        raise ValueError("neural-collapse metrics need at least two classes")

    mu_c = torch.zeros(C, d, dtype=H.dtype, device=H.device).index_add_(0, y_idx, H) / counts[:, None]
    mu_g = H.mean(dim=0)
    M = mu_c - mu_g  # Ṁ [C, d]: centred class means (global mean of samples, as Papyan et al.)

    # NC1 = Tr(Σ_W Σ_B^†)/C in the ≤ C-dimensional range of Σ_B.
    _, s, Qh = torch.linalg.svd(M, full_matrices=False)
    keep = s > s.max() * max(C, d) * torch.finfo(H.dtype).eps
    if keep.any():
        proj = (H - mu_c[y_idx]) @ Qh[keep].T  # [N, r] within-class deviations along Σ_B's eigenvectors
        nc1 = ((proj**2).sum(dim=0) / s[keep] ** 2).sum().item() / N
    else:
        nc1 = _NAN  # all class means coincide: Σ_B = 0

    out = dict(zip(("nc2_equinorm", "nc2_equiangular", "nc2_maxangle"), _equi_stats(M), strict=True))
    out = {"nc1": nc1, **out}

    ncc = classes[torch.cdist(H, mu_c).argmin(dim=1)]  # nearest class centre prediction
    out["ncc_accuracy"] = (ncc == y).double().mean().item()

    nan_keys = ("nc3", "nc3_frobenius", "nc2_w_equinorm", "nc2_w_equiangular", "nc2_w_maxangle")
    out.update(dict.fromkeys(nan_keys, _NAN))
    if classifier_weight is not None:
        W_all = _t(classifier_weight).to(device=H.device, dtype=torch.float64)
        if W_all.ndim != 2 or W_all.shape[1] != d or int(classes.max()) >= W_all.shape[0] or int(classes.min()) < 0:
            raise ValueError(
                f"classifier_weight must be [C, d={d}] with a row per label value, got "
                f"{tuple(W_all.shape)} for labels in [{int(classes.min())}, {int(classes.max())}]"
            )
        W = W_all[classes]
        diff = W / W.norm() - M / M.norm()
        out["nc3"] = (diff**2).sum().item()
        out["nc3_frobenius"] = out["nc3"] ** 0.5
        out.update(zip(("nc2_w_equinorm", "nc2_w_equiangular", "nc2_w_maxangle"), _equi_stats(W), strict=True))
        if predictions is None:
            logits = H @ W_all.T
            if classifier_bias is not None:
                logits = logits + _t(classifier_bias).to(logits)
            predictions = logits.argmax(dim=1)

    if predictions is None:
        out["nc4"] = _NAN
    else:
        pred = _t(predictions).to(device=H.device, dtype=torch.long)
        if pred.shape != y.shape:
            raise ValueError(f"predictions must be [n={N}], got {tuple(pred.shape)}")
        out["nc4"] = (ncc != pred).double().mean().item()
    return out


def collapse_by_layer(
    features: Sequence[Tensor | np.ndarray],
    labels: Tensor | np.ndarray,
    *,
    classifier_weight: Tensor | np.ndarray | None = None,
    classifier_bias: Tensor | np.ndarray | None = None,
    predictions: Tensor | np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Layer-wise neural collapse: :func:`collapse_metrics` for each layer's features.

    The classifier lives in the last layer's space, so ``nc3`` and the ``nc2_w_*`` are computed for the last layer
    only (NaN elsewhere). The network's predictions (given, or from the classifier on the last layer) are the same
    for every layer, so ``nc4`` at layer l measures how far that layer's NCC rule is from the network's decision.

    Args:
        features: L feature matrices [n, d_l] (widths may differ), ordered from input to output.
        labels: class labels [n].
        classifier_weight: last-layer weight [C, d_L].
        classifier_bias: last-layer bias [C].
        predictions: network predictions [n].

    Returns:
        The keys of :func:`collapse_metrics`, each an array [L] (float64).
    """
    if len(features) == 0:
        raise ValueError("need at least one layer of features")
    if predictions is None and classifier_weight is not None:
        H = _t(features[-1]).to(torch.float64)
        logits = H @ _t(classifier_weight).to(H).T
        if classifier_bias is not None:
            logits = logits + _t(classifier_bias).to(logits)
        predictions = logits.argmax(dim=1)
    rows = [
        collapse_metrics(
            f, labels, predictions=predictions, classifier_weight=classifier_weight if i == len(features) - 1 else None
        )
        for i, f in enumerate(features)
    ]
    return {key: np.array([r[key] for r in rows], dtype=np.float64) for key in rows[0]}
