"""Residual Alignment of a model, all four properties and neural collapse in one call: what a page, the CLI and a
notebook show.

*Residual Alignment: Uncovering the Mechanisms of Residual Networks* describes four properties of trained ResNets,
measured here at N inputs:

- RA1: every input's trajectory h_0 → h_L through the blocks is a line with equal steps — ``straightness`` (1 =
  straight) and ``spacing_cv`` (0 = equal steps), and the trajectories projected on the top-2 principal
  directions of all states (``traj_pca``) and on two random Gaussian directions, the paper's choice (``traj_gauss``);
- RA2: the top singular vectors of one block's Jacobian diagonalise every other block's —
  ``scores [L, L]`` (energy on the diagonal of U_{j,K}ᵀ J_i V_{j,K}, mean over inputs), ``align_offdiag`` (mean
  over i ≠ j) beside ``baseline`` (Haar-random bases), and the matrices themselves for the first input (``grid``);
- RA3: the Jacobians have rank about C (classes) — ``sigma [L, K]`` and ``topk_ratio``, the mean of the top C
  singular values over the mean of the next ones;
- RA4: σ₁ of block i falls like 1/i after RA begins — the least-squares line through 1/σ₁ against the block index
  from block ``fit_start`` + 1 on (1-based; default 5, as the paper's Fig. 4b fits "post block 5", slope 0.992)
  (``inv_sigma``, ``inv_sigma_fit``, ``inv_sigma1_slope``, ``inv_sigma1_r2``, ``fit_start``).

Neural collapse NC1–NC4 (Papyan et al. 2020, :mod:`lab.analysis.collapse`) is computed per layer on training
inputs, which the paper shows co-occurs with RA (its Fig. 7). Conv features are averaged over space first (the
classifier's view of them); the last layer uses the model's pooled features, where its classifier lives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from lab.analysis.alignment import inverse_sigma_fit
from lab.analysis.alignment_stats import alignment_stats
from lab.analysis.collapse import collapse_by_layer
from lab.analysis.trajectories import project_trajectories, trajectory_stats
from lab.hooks import eval_mode

__all__ = ["NC_KEYS", "PAPER_K", "RA4_FIT_START", "SCALARS", "collapse_of", "residual_alignment"]

NC_KEYS = ("nc1", "nc2_equinorm", "nc2_equiangular", "nc2_maxangle", "nc3", "nc4", "ncc_accuracy", "nc2_w_equinorm",
           "nc2_w_equiangular", "nc2_w_maxangle")  # the nc2_w_* (the classifier's rows) are NaN but at the last layer
RA4_FIT_START = 4  # 0-based: the fit starts at block 5 (1-based), where the paper's Fig. 4b fits it
PAPER_K = 30  # singular triplets per block: the paper's K ranges from 10 to 30, and its Fig. 2 shows K = 30
SCALARS = ("align_offdiag", "baseline_mean", "topk_ratio", "inv_sigma1_slope", "inv_sigma1_r2", "straightness",
           "spacing_cv")
"""The one-number summaries (the CLI's table and ``alignment.json``'s top level)."""


def _trajectory_states(states: list[Tensor]) -> Tensor:
    """[T, n, D] from the residual stream: every state when all share one size, else the last stage's (a
    trajectory lives in one space; transitions between conv stages change it)."""
    flat = [h.flatten(1) for h in states]
    last = flat[-1].shape[1]
    return torch.stack([h for h in flat if h.shape[1] == last]) if len(flat) > 1 else torch.stack(flat)


def _pooled(h: Tensor) -> Tensor:
    """Features a linear rule reads: ``[n, D]`` as is, ``[n, C, H, W]`` averaged over space to ``[n, C]``."""
    return h.mean(dim=(2, 3)) if h.ndim == 4 else h.flatten(1)


@torch.no_grad()
def collapse_of(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, np.ndarray]:
    """NC1–NC4 (:data:`NC_KEYS`, each ``[L+1]``) of h_0 … h_L at inputs x (labels y), with the model's head as the
    last layer's classifier."""
    with eval_mode(model):
        states = model.forward_intermediates(x, intermediates_only=True)
        features = [_pooled(h) for h in states[:-1]]
        pool = getattr(model, "pool_features", None)
        features.append(pool(states[-1]) if pool is not None else _pooled(states[-1]))
    head = getattr(model, "head", None)
    weight = getattr(head, "weight", None)
    fits = weight is not None and weight.shape[1] == features[-1].shape[1]
    out = collapse_by_layer([f.double() for f in features], y, classifier_weight=weight if fits else None,
                            classifier_bias=getattr(head, "bias", None) if fits else None)
    return {k: out[k] for k in NC_KEYS}


def residual_alignment(model: nn.Module, x: Tensor, y: Tensor, k: int, *, nc_x: Tensor | None = None,
                       nc_y: Tensor | None = None, num_classes: int | None = None, grid_inputs: int = 1,
                       baseline_trials: int = 8, fit_start: int = RA4_FIT_START,
                       seed: int = 0, progress: Callable[[int, int], None] | None = None
                       ) -> dict[str, np.ndarray]:
    """RA1–RA4 at the inputs ``x`` and NC1–NC4 at ``nc_x``, in eval mode (the training flags are restored).

    Args:
        model: a lab model (``forward_intermediates``, ``iter_blocks``).
        x: analysed inputs ``[N, ...]`` (test inputs in the paper).
        y: their labels ``[N]`` (colour the trajectories).
        k: singular triplets per block (the paper: K from 10 to 30, :data:`PAPER_K` in its Fig. 2).
        nc_x: inputs for neural collapse (training inputs; several per class); default ``x``.
        nc_y: their labels.
        num_classes: C, for ``topk_ratio`` (default: the model's ``num_classes``).
        grid_inputs: inputs whose K × K alignment matrices are kept.
        baseline_trials: random basis pairs per block for the baseline.
        fit_start: first block (0-based) in the 1/σ₁ fit (default 4: from block 5, as the paper's Fig. 4b); a
            model with fewer blocks fits its last two.
        seed: seed of the randomized parts (baseline, Gaussian directions).
        progress: ``progress(done, total)`` of the Jacobians (:func:`~lab.analysis.alignment_stats.alignment_stats`).

    Returns:
        float numpy arrays: ``sigma [L, K]`` (mean over inputs), ``scores [L, L]``, ``grid [G, L, L, K, K]``,
        ``baseline [L]``, ``baseline_std [L]``, ``inv_sigma [L]``, ``inv_sigma_fit [L]`` (NaN before
        ``fit_start``), ``traj_pca`` and
        ``traj_gauss [T, N, 2]``, ``labels [N]``, ``class_of_means [C']`` with ``traj_means_pca`` and
        ``traj_means_gauss [T, C', 2]`` (class means of the projected trajectories), ``straightness_per_input
        [N]``, the NC keys ``[L+1]``, and 0-d arrays for the scalars in :data:`SCALARS` and ``num_classes``.
        Pairs (i, j) whose Jacobians act on different spaces (different conv stages) are NaN.
    """
    C = int(num_classes or getattr(model, "num_classes", 0) or int(y.max()) + 1)
    stats = alignment_stats(model, x, k, grid_inputs=grid_inputs, baseline_trials=baseline_trials, seed=seed,
                            progress=progress)
    sigma = stats["sigma"].double().mean(dim=0)  # [L, K]
    scores = stats["scores"].double().nanmean(dim=0)  # [L, L]
    L = len(sigma)
    off = ~torch.eye(L, dtype=torch.bool)
    offdiag = scores[off]
    align_offdiag = float(offdiag.nanmean()) if L > 1 and offdiag.isfinite().any() else math.nan
    topk_ratio = float(sigma[:, :C].mean() / sigma[:, C:].mean()) if k > C else math.nan
    out: dict[str, np.ndarray] = {}
    fit_start = max(0, min(fit_start, L - 2))
    if L >= 2 and bool((sigma[fit_start:, 0] > 0).all()):
        fit = inverse_sigma_fit(sigma[:, 0], start=fit_start)
        slope, r2, inv, line = fit["slope"], fit["r2"], fit["inv_sigma"], fit["fit"].copy()
        line[:fit_start] = np.nan  # the line is drawn where it was fitted, not extrapolated back
    else:  # one block, or a block whose Jacobian vanished: no line to fit
        slope = r2 = math.nan
        inv = (1.0 / sigma[:, 0]).numpy()
        line = np.full(L, np.nan)
    with torch.no_grad(), eval_mode(model):
        states = _trajectory_states(model.forward_intermediates(x, intermediates_only=True)).double()
    traj = trajectory_stats(states)
    pca_xy = project_trajectories(states, basis="pca")
    gauss_xy = project_trajectories(states, basis="gaussian", seed=seed)
    classes = torch.unique(y.cpu())
    means = {name: torch.stack([xy[:, y.cpu() == c].mean(dim=1) for c in classes], dim=1)
             for name, xy in (("pca", pca_xy), ("gauss", gauss_xy))}
    out.update(
        sigma=sigma.numpy(), scores=scores.numpy(), grid=stats["grid"].double().numpy(),
        baseline=stats["baseline"].double().numpy(), baseline_std=stats["baseline_std"].double().numpy(),
        inv_sigma=np.asarray(inv, np.float64), inv_sigma_fit=np.asarray(line, np.float64),
        traj_pca=pca_xy.numpy(), traj_gauss=gauss_xy.numpy(), labels=y.cpu().numpy().astype(np.int64),
        class_of_means=classes.numpy().astype(np.int64), traj_means_pca=means["pca"].numpy(),
        traj_means_gauss=means["gauss"].numpy(), straightness_per_input=traj["straightness_per_input"],
        **collapse_of(model, x if nc_x is None else nc_x, y if nc_y is None else nc_y),
    )
    scalars = {"align_offdiag": align_offdiag, "baseline_mean": float(stats["baseline"].double().mean()),
               "topk_ratio": topk_ratio, "inv_sigma1_slope": slope, "inv_sigma1_r2": r2, "fit_start": fit_start,
               "straightness": traj["straightness"], "spacing_cv": traj["spacing_cv"], "num_classes": C}
    out.update({key: np.asarray(value, np.float64) for key, value in scalars.items()})
    return out
