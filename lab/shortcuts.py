"""Shortcut schedules: the one place where the α of every residual block is decided.

A residual block computes ``x_{l+1} = α_l · x_l + β_l · f(x_l)`` (Eq. 3 of *Residual Connections Harm Generative
Representation Learning*, with a branch scale β). The schedules:

=================  =======================================================================================
``identity``       α_l = 1: the standard residual network.
``linear``         α falls linearly from α_0 = 1 to α_{L-1} = α_min exactly: α_l = 1 − l(1 − α_min)/(L − 1).
                   The lab's "decayed" default. With L = 1 the single block is both first and last; it gets
                   α_min, so the knob still acts.
``paper_eq5``      The literal Eq. 5 of the paper: α_l = 1 − l(1 − α_min)/L. Note that α_{L-1} = α_min + (1 − α_min)/L,
                   not α_min as the paper's text claims; ``linear`` is the reading that reaches α_min.
``sublayer``       The authors' released MAE code: one α per residual *sub-layer* (attention, MLP), linear from 1
                   to α_min over all sub-layers; 2L values for a transformer of L blocks (``alphas`` default), L
                   values for a model with one residual sub-layer per block (then identical to ``linear``).
``none``           α = 0: a plain feed-forward network (no shortcut).
``constant``       α_l = α_min for every block.
``scaled_both``    Table 3b control √0.5 · (x + f(x)): α = β = √0.5.
``scaled_branch``  Table 3b control x + √0.5 · f(x): α = 1, β = √0.5.
=================  =======================================================================================
"""

from __future__ import annotations

import math

SCHEDULES = ("identity", "linear", "paper_eq5", "sublayer", "none", "constant", "scaled_both", "scaled_branch")
DECAYED = ("linear", "paper_eq5", "sublayer", "constant")  # schedules that read alpha_min
SQRT_HALF = math.sqrt(0.5)


def _check(schedule: str, depth: int, alpha_min: float) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown shortcut schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1; got {depth!r}")
    if not 0.0 <= alpha_min <= 1.0:
        raise ValueError(f"alpha_min must be in [0, 1]; got {alpha_min}")


def _linspace(n: int, alpha_min: float) -> list[float]:
    if n == 1:
        return [float(alpha_min)]
    return [1.0 - k * (1.0 - alpha_min) / (n - 1) for k in range(n)]


def alphas(schedule: str, depth: int, alpha_min: float = 1.0, *, sublayers_per_block: int = 2) -> list[float]:
    """The shortcut scale α of every residual block (or sub-layer).

    Args:
        schedule: one of :data:`SCHEDULES` (see the module docstring for each formula).
        depth: number of residual blocks L (>= 1).
        alpha_min: the smallest α, reached at the last block by the decayed schedules; ignored by the others.
        sublayers_per_block: residual sub-layers per block, used by ``sublayer`` alone (2 for a ViT block).

    Returns:
        L floats, or ``L · sublayers_per_block`` for ``sublayer`` (2L by default).
    """
    _check(schedule, depth, alpha_min)
    if schedule == "identity" or schedule == "scaled_branch":
        return [1.0] * depth
    if schedule == "none":
        return [0.0] * depth
    if schedule == "constant":
        return [float(alpha_min)] * depth
    if schedule == "scaled_both":
        return [SQRT_HALF] * depth
    if schedule == "linear":
        return _linspace(depth, alpha_min)
    if schedule == "paper_eq5":
        return [1.0 - l * (1.0 - alpha_min) / depth for l in range(depth)]
    return _linspace(depth * sublayers_per_block, alpha_min)  # sublayer


def branch_scales(schedule: str, depth: int) -> list[float]:
    """The branch scale β of every block: √0.5 for the two Table-3b controls, 1 otherwise."""
    _check(schedule, depth, 1.0)
    beta = SQRT_HALF if schedule in ("scaled_both", "scaled_branch") else 1.0
    return [beta] * depth


def block_scales(schedule: str, depth: int, alpha_min: float = 1.0) -> list[tuple[float, float]]:
    """(α, β) per block for models with one residual sub-layer per block, such as the residual MLP."""
    a = alphas(schedule, depth, alpha_min, sublayers_per_block=1)
    return list(zip(a, branch_scales(schedule, depth), strict=True))
