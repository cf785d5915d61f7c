"""Residual Alignment's RA1: each input's trajectory through the blocks, drawn and measured.

RA1 of *Residual Alignment: Uncovering the Mechanisms of Residual Networks*: the representations of an input after
each block lie on a line, equally spaced. :func:`project_trajectories` draws every input's path h_0, h_1, …, h_L in
two dimensions (the paper's Fig. 1), and :func:`trajectory_stats` measures how straight and how evenly spaced the
paths are in the full space. The other properties (RA2–RA4, on residual Jacobians) are in
:mod:`lab.analysis.alignment`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import Tensor

from lab.analysis.embed import pca

__all__ = ["project_trajectories", "trajectory_stats"]


def project_trajectories(
    states: Tensor | np.ndarray, *, basis: Literal["gaussian", "pca"] = "gaussian", seed: int = 0
) -> Tensor | np.ndarray:
    """RA1 picture: project every input's representation after each block onto two directions.

    ``"gaussian"`` uses two independent N(0, I_D) vectors, each scaled to unit norm (not orthogonalised; in high D
    they are nearly orthogonal), as in the paper's Fig. 1; no centring. ``"pca"`` uses the top two principal axes of
    all states pooled ((L+1)·n points, centred by their mean) with the sign convention of :func:`pca`.

    Args:
        states: representations [L+1, n, D]: h_0 (input to block 1) then the output of each of L blocks.
        basis: which directions.
        seed: generator seed for the Gaussian directions.

    Returns:
        Coordinates [L+1, n, 2], a tensor if ``states`` is one, else a numpy array.
    """
    H = torch.as_tensor(states)
    if H.ndim != 3:
        raise ValueError(f"states must be [L+1, n, D], got {tuple(H.shape)}")
    if not H.is_floating_point():
        H = H.to(torch.get_default_dtype())
    T, n, D = H.shape
    if basis == "gaussian":
        gen = torch.Generator(device="cpu").manual_seed(seed)
        G = torch.randn(D, 2, generator=gen, dtype=torch.float64)
        G = (G / G.norm(dim=0)).to(H)
        out = H @ G
    elif basis == "pca":
        out = pca(H.reshape(T * n, D), k=2)[0].reshape(T, n, 2)
    else:
        raise ValueError(f"basis must be 'gaussian' or 'pca', got {basis!r}")
    return out if isinstance(states, Tensor) else out.numpy()


def trajectory_stats(states: Tensor | np.ndarray) -> dict:
    """RA1 statistics: how straight and how evenly spaced each input's trajectory is (Theorem 3.1's prediction).

    For input x with states h_0 … h_L, step lengths are d_l = ‖h_{l+1} − h_l‖. *Straightness* is
    ‖h_L − h_0‖ / Σ_l d_l (1 = a straight line traversed in one direction, smaller = bent or back-tracking).
    *Spacing CV* is std_l(d_l) / mean_l(d_l) with population std (0 = equally spaced, as RA1 predicts).

    Args:
        states: representations [L+1, n, D] (or [L+1, D] for one input), L ≥ 1.

    Returns:
        ``straightness`` and ``spacing_cv`` (means over inputs, ignoring NaN), ``straightness_per_input`` [n],
        ``spacing_cv_per_input`` [n] and ``step_lengths`` [L, n], float64 numpy. A trajectory that never moves
        has NaN statistics.
    """
    H = torch.as_tensor(states).detach().to(torch.float64)
    if H.ndim == 2:
        H = H[:, None]
    if H.ndim != 3 or H.shape[0] < 2:
        raise ValueError(f"states must be [L+1, n, D] with L >= 1, got {tuple(H.shape)}")
    steps = (H[1:] - H[:-1]).norm(dim=-1)  # [L, n]
    path = steps.sum(dim=0)
    chord = (H[-1] - H[0]).norm(dim=-1)
    mean_step = steps.mean(dim=0)
    nan = torch.full_like(path, float("nan"))
    straight = torch.where(path > 0, chord / torch.where(path > 0, path, 1.0), nan)
    cv = torch.where(mean_step > 0, steps.std(dim=0, correction=0) / torch.where(mean_step > 0, mean_step, 1.0), nan)
    straight_np, cv_np = straight.cpu().numpy(), cv.cpu().numpy()
    with np.errstate(all="ignore"):
        mean_straight = float(np.nanmean(straight_np)) if np.isfinite(straight_np).any() else float("nan")
        mean_cv = float(np.nanmean(cv_np)) if np.isfinite(cv_np).any() else float("nan")
    return {
        "straightness": mean_straight,
        "spacing_cv": mean_cv,
        "straightness_per_input": straight_np,
        "spacing_cv_per_input": cv_np,
        "step_lengths": steps.cpu().numpy(),
    }
