"""Residual Alignment of a model, all four properties and neural collapse in one call: what a page, the CLI and a
notebook show.

*Residual Alignment: Uncovering the Mechanisms of Residual Networks* describes four properties of trained ResNets,
measured here at N inputs:

- RA1: every input's trajectory h_0 → h_L through the blocks is a line with equal steps — ``straightness`` (1 =
  straight) and ``spacing_cv`` (0 = equal steps), measured within a *stage*: a run of consecutive states of one
  layout (a conv ResNet's 128 × 2 × 2 and 512 × 1 × 1 states have one size but are not one space). Every stage of
  two or more blocks is measured (``straightness_by_stage``, ``spacing_cv_by_stage``); the headline numbers and the
  trajectories projected on the top-2 principal directions (``traj_pca``) and on two random Gaussian directions,
  the paper's choice (``traj_gauss``), are those of the longest stage (``ra1_stage``; the later one on a tie);
- RA2: the top singular vectors of one block's Jacobian diagonalise every other block's —
  ``scores [L, L]`` (the lab's alignment score: the share of U_{j,K}ᵀ J_i V_{j,K}'s energy on its diagonal, mean
  over inputs), ``align_offdiag`` (mean over the pairs i ≠ j of one layout, with a 95 % bootstrap interval over
  inputs) beside ``baseline`` (the same score for Haar-random bases, about 1/K, with its interval over the
  draws), and the matrices themselves for the first input (``grid``);
- RA3: the Jacobians have rank about C (classes) — ``sigma [L, K]`` and ``topk_ratio``, the mean of the top C
  singular values over the mean of the next C (the paper's Fig. 4a: "the top-10 singular values noticeably surpass
  the next 10"); it needs K ≥ 2C;
- RA4: σ₁ of block i falls like 1/i after RA begins — the least-squares line through 1/σ₁ against the block index
  from block ``fit_start`` + 1 on (1-based; default 5, as the paper's Fig. 4b fits "post block 5", slope 0.992),
  within one stage: the fit's blocks all map one layout to itself, so a range that crosses a stage boundary or a
  projection block is cut to the stage holding most of it (``fit_start``, ``fit_stop``; ``inv_sigma``,
  ``inv_sigma_fit``, ``inv_sigma1_slope``, ``inv_sigma1_r2``).

A number that cannot be measured is NaN, and :func:`alignment_reasons` says why in words (a block whose residual
branch is zero, as timm initialises each branch's last norm; too few blocks in one stage; K below 2C).

Neural collapse NC1–NC4 (Papyan et al. 2020, :mod:`lab.analysis.collapse`) is computed per layer on training
inputs, which the paper shows co-occurs with RA (its Fig. 7). Conv features are averaged over space first (the
classifier's view of them); the last layer uses the model's pooled features, where its classifier lives — when the
classifier has one output per class of the data (a head for another label set is not read as the data's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from lab.analysis.alignment import inverse_sigma_fit
from lab.analysis.alignment_stats import alignment_stats
from lab.analysis.collapse import collapse_by_layer
from lab.analysis.jacobian import jacobian_layouts
from lab.analysis.token_jacobian import check_positions
from lab.analysis.trajectories import project_trajectories, trajectory_stats
from lab.hooks import eval_mode

__all__ = ["NC_KEYS", "PAPER_K", "RA4_FIT_START", "SCALARS", "alignment_reasons", "collapse_of", "fit_range",
           "head_fits", "residual_alignment", "stages_of"]

NC_KEYS = ("nc1", "nc2_equinorm", "nc2_equiangular", "nc2_maxangle", "nc3", "nc4", "ncc_accuracy", "nc2_w_equinorm",
           "nc2_w_equiangular", "nc2_w_maxangle")  # the nc2_w_* (the classifier's rows) are NaN but at the last layer
RA4_FIT_START = 4  # 0-based: the fit starts at block 5 (1-based), where the paper's Fig. 4b fits it
PAPER_K = 30  # singular triplets per block: the paper's K ranges from 10 to 30, and its Fig. 2 shows K = 30
SCALARS = ("align_offdiag", "baseline_mean", "topk_ratio", "inv_sigma1_slope", "inv_sigma1_r2", "straightness",
           "spacing_cv")
"""The one-number summaries (the CLI's table and ``alignment.json``'s top level)."""


def stages_of(shapes: Sequence[tuple[int, ...]]) -> np.ndarray:
    """Stage of every state: consecutive states of one layout share a stage, numbered from 0.

    Args:
        shapes: the layout of h_0 … h_L without the batch dimension (``(C, H, W)``, ``(tokens, D)``, ``(D,)``).

    Returns:
        int64 ``[L+1]``: for a ResNet with stages of 3 and 2 blocks after a projection, ``[0, 0, 0, 0, 1, 1]``.
    """
    stage = np.zeros(len(shapes), dtype=np.int64)
    for i in range(1, len(shapes)):
        stage[i] = stage[i - 1] + (tuple(shapes[i]) != tuple(shapes[i - 1]))
    return stage


def _longest(stage: np.ndarray, members: np.ndarray) -> int:
    """The stage holding most of ``members`` (a boolean mask over ``stage``), the later one on a tie; -1 if none."""
    counts = np.bincount(stage[members], minlength=int(stage.max()) + 1) if members.any() else np.zeros(1, int)
    return int(len(counts) - 1 - np.argmax(counts[::-1])) if counts.max() > 0 else -1


def fit_range(stage: np.ndarray, square: np.ndarray, start: int) -> tuple[int, int]:
    """RA4's fitted blocks ``[fit_start, fit_stop)`` (0-based) from block ``start`` on, within one stage.

    A block is fitted when its Jacobian maps a layout to itself (no projection block) and its index is at least
    ``start``; of the stages such blocks lie in, the one holding most of them (the later on a tie) gives the range.

    Args:
        stage: the stage of each block's input ``[L]`` (:func:`stages_of` of h_0 … h_{L−1}).
        square: whether each block's Jacobian keeps its layout ``[L]`` (output layout = input layout).
        start: the first block asked for, 0-based.

    Returns:
        ``(fit_start, fit_stop)``; fewer than two blocks (``fit_stop - fit_start < 2``) means there is no line to fit.
    """
    fitted = np.asarray(square, dtype=bool) & (np.arange(len(stage)) >= start)
    best = _longest(stage, fitted)
    if best < 0:
        return start, start
    blocks = np.flatnonzero(fitted & (stage == best))
    return int(blocks[0]), int(blocks[-1]) + 1


def _bootstrap(values: np.ndarray, seed: int, resamples: int = 2000) -> np.ndarray:
    """95 % percentile bootstrap interval of the mean of ``values [n, ...]`` over its first axis (the rest
    averaged, NaN ignored); NaN where fewer than two rows are finite."""
    rows = np.array([np.nanmean(v) if np.isfinite(v).any() else np.nan for v in values.reshape(len(values), -1)])
    rows = rows[np.isfinite(rows)]
    if len(rows) < 2:
        return np.full(2, np.nan)
    rng = np.random.default_rng(seed)
    means = rows[rng.integers(0, len(rows), (resamples, len(rows)))].mean(axis=1)
    return np.quantile(means, [0.025, 0.975])


def _pooled(h: Tensor) -> Tensor:
    """Features a linear rule reads: ``[n, D]`` as is, ``[n, C, H, W]`` averaged over space to ``[n, C]``."""
    return h.mean(dim=(2, 3)) if h.ndim == 4 else h.flatten(1)


def head_fits(model: nn.Module, features: int, num_classes: int) -> bool:
    """Whether the model's head (``model.head``'s weight) reads ``features`` into one output per class of the
    data: a head trained for another label set (1,000 ImageNet classes against 10 digits) is not the data's
    classifier."""
    weight = getattr(getattr(model, "head", None), "weight", None)
    return weight is not None and weight.ndim == 2 and tuple(weight.shape) == (num_classes, features)


@torch.no_grad()
def collapse_of(model: nn.Module, x: Tensor, y: Tensor, num_classes: int | None = None) -> dict[str, np.ndarray]:
    """NC1–NC4 (:data:`NC_KEYS`, each ``[L+1]``) of h_0 … h_L at inputs x (labels y), with the model's head as the
    last layer's classifier when it has one output per class (``num_classes``, default ``y.max() + 1``)."""
    with eval_mode(model):
        states = model.forward_intermediates(x, intermediates_only=True)
        features = [_pooled(h) for h in states[:-1]]
        pool = getattr(model, "pool_features", None)
        features.append(pool(states[-1]) if pool is not None else _pooled(states[-1]))
    head = getattr(model, "head", None)
    C = int(num_classes or int(y.max()) + 1)
    fits = head_fits(model, features[-1].shape[1], C)
    out = collapse_by_layer([f.double() for f in features], y, classifier_weight=head.weight if fits else None,
                            classifier_bias=getattr(head, "bias", None) if fits else None)
    return {k: out[k] for k in NC_KEYS}


def residual_alignment(model: nn.Module, x: Tensor, y: Tensor, k: int, *, nc_x: Tensor | None = None,
                       nc_y: Tensor | None = None, num_classes: int | None = None, grid_inputs: int = 1,
                       baseline_trials: int = 8, fit_start: int = RA4_FIT_START,
                       seed: int = 0, positions: Sequence[int] | None = None,
                       progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """RA1–RA4 at the inputs ``x`` and NC1–NC4 at ``nc_x``, in eval mode (the training flags are restored).

    Args:
        model: a lab model (``forward_intermediates``, ``iter_blocks``).
        x: analysed inputs ``[N, ...]`` (test inputs in the paper).
        y: their labels ``[N]`` (colour the trajectories).
        k: singular triplets per block (the paper: K from 10 to 30, :data:`PAPER_K` in its Fig. 2).
        nc_x: inputs for neural collapse (training inputs; several per class); default ``x``.
        nc_y: their labels.
        num_classes: C, for ``topk_ratio`` and the head (default: the model's ``num_classes``); 0 for a network
            without classes (a language model): RA3 and neural collapse are then n/a.
        grid_inputs: inputs whose K × K alignment matrices are kept.
        baseline_trials: random basis pairs per block for the baseline.
        fit_start: first block (0-based) in the 1/σ₁ fit (default 4: from block 5, as the paper's Fig. 4b); a
            model with fewer blocks fits its last two; the fit stays within one stage (:func:`fit_range`).
        seed: seed of the randomized parts (baseline, Gaussian directions, bootstrap).
        positions: for a sequence model (states ``[B, T, D]``, a Transformer decoder), the token positions analysed
            one by one (:mod:`lab.analysis.token_jacobian`): every (input, position) pair is then one input of
            RA1–RA4, row ``b · P + p`` of the per-input results, labelled with its input's label.
        progress: ``progress(done, total)`` of the Jacobians (:func:`~lab.analysis.alignment_stats.alignment_stats`).

    Returns:
        float numpy arrays: ``sigma [L, K]`` (mean over inputs), ``scores [L, L]``, ``grid [G, L, L, K, K]``,
        ``baseline [L]``, ``baseline_std [L]``, ``baseline_trials [T, L]``, ``align_offdiag_per_input [N]``,
        ``align_offdiag_ci [2]`` and ``baseline_ci [2]`` (95 % bootstrap intervals over inputs and over the draws),
        ``inv_sigma [L]``, ``inv_sigma_fit [L]`` (NaN outside the fit), ``stage [L+1]`` (:func:`stages_of`),
        ``straightness_by_stage`` and ``spacing_cv_by_stage [S]`` (NaN for a stage of one block), ``traj_pca`` and
        ``traj_gauss [T, N, 2]`` (the ``ra1_stage``'s T states), ``labels [N]``, ``class_of_means [C']`` with
        ``traj_means_pca`` and ``traj_means_gauss [T, C', 2]`` (class means of the projected trajectories),
        ``straightness_per_input [N]``, the NC keys ``[L+1]``, and 0-d arrays for the scalars in :data:`SCALARS`,
        ``num_classes``, ``k``, ``ra2_pairs`` (block pairs of one layout the score averages), ``ra1_stage``,
        ``fit_asked`` (the first block asked for), ``fit_start``, ``fit_stop`` and ``head_classes`` (the head's
        outputs; 0 without a head). Pairs (i, j) whose Jacobians act on different spaces (different conv stages)
        are NaN.
    """
    y_inputs = y  # one label per input (NC reads the inputs whole)
    C = int(num_classes if num_classes is not None else getattr(model, "num_classes", 0) or int(y.max()) + 1)
    stats = alignment_stats(model, x, k, grid_inputs=grid_inputs, baseline_trials=baseline_trials, seed=seed,
                            positions=positions, progress=progress)
    sigma = stats["sigma"].double().mean(dim=0)  # [L, K]
    per_input = stats["scores"].double()  # [N, L, L]
    scores = per_input.nanmean(dim=0)  # [L, L]
    L = len(sigma)
    off = ~torch.eye(L, dtype=torch.bool)
    offdiag = scores[off]
    align_offdiag = float(offdiag.nanmean()) if L > 1 and offdiag.isfinite().any() else math.nan
    pairs = int(torch.isfinite(per_input[:, off]).any(dim=0).sum())
    by_input = per_input[:, off].numpy()  # [N, L(L-1)]
    with np.errstate(all="ignore"):
        offdiag_per_input = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in by_input])
    topk_ratio = float(sigma[:, :C].mean() / sigma[:, C:2 * C].mean()) if C >= 1 and k >= 2 * C else math.nan

    with torch.no_grad(), eval_mode(model):
        states = model.forward_intermediates(x, intermediates_only=True)
    if positions is None:
        square = np.array([out_shape == in_shape for out_shape, in_shape in jacobian_layouts(model, x[:1])])
    else:  # one token's state at a time: [B, T, D] → [B·P, D]; a token's Jacobian maps its state to itself
        pos = check_positions(positions, states[0].shape[1])
        states = [h[:, pos].reshape(-1, h.shape[-1]) for h in states]
        y = y.repeat_interleave(len(pos))
        square = np.ones(L, dtype=bool)
    stage = stages_of([tuple(h.shape[1:]) for h in states])
    fit_start = max(0, min(fit_start, L - 2))
    lo, hi = fit_range(stage[:L], square, fit_start)
    line = np.full(L, np.nan)
    inv = (1.0 / sigma[:, 0]).numpy()
    slope = r2 = math.nan
    if hi - lo >= 2 and bool((sigma[lo:hi, 0] > 0).all()):
        fit = inverse_sigma_fit(sigma[:, 0], start=lo, stop=hi)
        slope, r2, inv = fit["slope"], fit["r2"], fit["inv_sigma"]
        line[lo:hi] = fit["fit"][lo:hi]  # drawn where it was fitted, not extrapolated

    S = int(stage.max()) + 1
    trajectories = [torch.stack([states[i].flatten(1) for i in np.flatnonzero(stage == s)]).double()
                    for s in range(S)]
    # two steps at least: one step is trivially straight and evenly spaced
    per_stage = [trajectory_stats(t) if len(t) >= 3 else None for t in trajectories]
    by_stage = {key: np.array([t[key] if t else np.nan for t in per_stage]) for key in ("straightness", "spacing_cv")}
    ra1_stage = _longest(stage, np.ones(len(stage), dtype=bool))
    trajectory, traj = trajectories[ra1_stage], per_stage[ra1_stage]
    pca_xy = project_trajectories(trajectory, basis="pca")
    gauss_xy = project_trajectories(trajectory, basis="gaussian", seed=seed)
    classes = torch.unique(y.cpu())
    means = {name: torch.stack([xy[:, y.cpu() == c].mean(dim=1) for c in classes], dim=1)
             for name, xy in (("pca", pca_xy), ("gauss", gauss_xy))}
    head = getattr(getattr(model, "head", None), "weight", None)
    out: dict[str, np.ndarray] = dict(
        sigma=sigma.numpy(), scores=scores.numpy(), grid=stats["grid"].double().numpy(),
        baseline=stats["baseline"].double().numpy(), baseline_std=stats["baseline_std"].double().numpy(),
        baseline_trials=stats["baseline_trials"].double().numpy(), align_offdiag_per_input=offdiag_per_input,
        align_offdiag_ci=_bootstrap(by_input, seed), baseline_ci=_bootstrap(stats["baseline_trials"].double().numpy(),
                                                                            seed),
        inv_sigma=np.asarray(inv, np.float64), inv_sigma_fit=line, stage=stage,
        straightness_by_stage=by_stage["straightness"], spacing_cv_by_stage=by_stage["spacing_cv"],
        traj_pca=pca_xy.numpy(), traj_gauss=gauss_xy.numpy(), labels=y.cpu().numpy().astype(np.int64),
        class_of_means=classes.numpy().astype(np.int64), traj_means_pca=means["pca"].numpy(),
        traj_means_gauss=means["gauss"].numpy(),
        straightness_per_input=traj["straightness_per_input"] if traj else np.full(len(y), np.nan),
        **(collapse_of(model, x if nc_x is None else nc_x, y_inputs if nc_y is None else nc_y, num_classes=C)
           if C >= 2 else {key: np.full(L + 1, np.nan) for key in NC_KEYS}),
    )
    scalars = {"align_offdiag": align_offdiag, "baseline_mean": float(stats["baseline"].double().mean()),
               "topk_ratio": topk_ratio, "inv_sigma1_slope": slope, "inv_sigma1_r2": r2, "fit_asked": fit_start,
               "fit_start": lo, "fit_stop": hi, "straightness": traj["straightness"] if traj else math.nan,
               "spacing_cv": traj["spacing_cv"] if traj else math.nan, "num_classes": C, "k": k,
               "ra2_pairs": pairs, "ra1_stage": ra1_stage,
               "head_classes": int(head.shape[0]) if head is not None and head.ndim == 2 else 0}
    out.update({key: np.asarray(value, np.float64) for key, value in scalars.items()})
    return out


def _blocks(indices: Sequence[int]) -> str:
    """``block 3`` or ``blocks 1–8`` (1-based) or ``blocks 1, 4, 6``."""
    one = [i + 1 for i in indices]
    if len(one) == 1:
        return f"block {one[0]}"
    if one == list(range(one[0], one[-1] + 1)):
        return f"blocks {one[0]}–{one[-1]}"
    return "blocks " + ", ".join(map(str, one))


def alignment_reasons(out: dict[str, np.ndarray]) -> dict[str, str]:
    """Why each scalar of :func:`residual_alignment`'s result that is NaN could not be measured, in words; and
    ``head``, where the model's head was not read as the data's classifier.

    Args:
        out: the result (or ``alignment.npz``'s arrays).

    Returns:
        ``{scalar: reason}`` for the scalars of :data:`SCALARS` that are NaN (``baseline_mean`` never is), plus
        ``head`` when the head's outputs differ from the data's classes and ``nc`` when there are no classes.
    """
    sigma, stage = np.asarray(out["sigma"]), np.asarray(out["stage"])
    L, C, k = len(sigma), int(out["num_classes"]), int(out["k"])
    zero = np.flatnonzero(~(sigma[:, 0] > 0))
    because_zero = ""
    if len(zero):
        because_zero = (f"{_blocks(zero)} of {L} {'has' if len(zero) == 1 else 'have'} a zero residual Jacobian at "
                        "every input (σ₁ = 0): the branch outputs zero whatever its input, as a branch whose last "
                        "normalisation or layer is initialised at zero does (timm's zero_init_last: an untrained "
                        "timm network)")
    reasons: dict[str, str] = {}
    if not np.isfinite(out["align_offdiag"]):
        if L < 2:
            reasons["align_offdiag"] = "RA2 compares pairs of blocks; the network has one"
        elif int(out["ra2_pairs"]) == 0 and not len(zero):
            reasons["align_offdiag"] = "no two blocks act on one space (every stage of the network has one block)"
        else:
            reasons["align_offdiag"] = because_zero or "every pair of blocks' alignment matrix is zero"
    if not np.isfinite(out["topk_ratio"]) and C < 1:
        reasons["topk_ratio"] = ("RA3 compares a Jacobian's rank with the number of classes C; the network has no "
                                 "classes (a language model)")
    elif not np.isfinite(out["topk_ratio"]):
        reasons["topk_ratio"] = (f"RA3 compares the top C = {C} singular values with the next {C}: it needs K ≥ {2 * C}"
                                 f", and K = {k}" if k < 2 * C else because_zero or "the next C singular values are 0")
    if not np.isfinite(out["inv_sigma1_slope"]):
        lo, hi = int(out["fit_start"]), int(out["fit_stop"])
        if hi - lo < 2:
            asked = int(out.get("fit_asked", out["fit_start"])) + 1
            reasons["inv_sigma1_slope"] = (f"RA4 fits 1/σ₁ over two or more blocks of one stage that keep its layout"
                                           f"; from block {asked} on, no stage of the network has more than "
                                           f"{hi - lo}")
        else:
            reasons["inv_sigma1_slope"] = because_zero or "σ₁ is 0 in a fitted block"
    if not np.isfinite(out["inv_sigma1_r2"]):
        reasons["inv_sigma1_r2"] = reasons.get("inv_sigma1_slope", "1/σ₁ is constant over the fitted blocks")
    for key in ("straightness", "spacing_cv"):
        if not np.isfinite(out[key]):
            n = int(np.bincount(stage).max()) - 1
            reasons[key] = (f"RA1 measures a trajectory over two or more blocks of one layout; the network's longest "
                            f"stage has {n} block{'s' if n != 1 else ''}" if n < 2 else
                            because_zero or "the trajectories do not move (every step is zero)")
    if C < 2:
        reasons["nc"] = "neural collapse (NC1–NC4) is measured per class; the network has none (a language model)"
    head = int(out.get("head_classes", 0))
    if head and head != C:
        reasons["head"] = (f"the network's head has {head} outputs and the data {C} classes: it is not read as the "
                           "data's classifier (NC2 of the classifier, NC3 and NC4 by the head are n/a)")
    return reasons
