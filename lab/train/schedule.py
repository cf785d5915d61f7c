"""Learning rate per optimisation step: ``constant``, ``cosine``, ``warmup_cosine`` and ``warmup_constant``.

A pure function of the step, so a run resumed at step s continues on the same curve. The cosine schedules decay
from ``train.lr`` to ``train.min_lr`` over the run's total steps (the Residual Alignment paper trains with cosine
decay, §2.3); ``warmup_cosine`` first rises linearly from 0 over ``train.warmup_steps`` steps plus
``train.warmup_epochs`` epochs (as MAE pretraining); ``warmup_constant`` rises the same way and then stays at
the peak (U-ViT's schedule). With ``train.lr_scaling=batch256`` the peak is ``train.lr`` ×
global batch / 256.
"""

from __future__ import annotations

import math

from lab.config import TrainConfig


def peak_lr(cfg: TrainConfig, batch: int) -> float:
    """The rate the schedule starts from (after warmup): ``train.lr``, or ``lr × batch / 256`` with
    ``train.lr_scaling=batch256`` (MAE's rule; ``batch`` is the global batch of one update)."""
    return cfg.lr * batch / 256 if cfg.lr_scaling == "batch256" else cfg.lr


def warmup_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """W: ``train.warmup_steps`` plus ``train.warmup_epochs`` epochs of steps."""
    return cfg.warmup_steps + cfg.warmup_epochs * steps_per_epoch


def learning_rate(cfg: TrainConfig, step: int, total_steps: int, *, steps_per_epoch: int = 1,
                  batch: int = 256) -> float:
    """The learning rate of optimisation step ``step`` (0-based) of a run of ``total_steps`` steps.

    ``constant``: the peak (:func:`peak_lr`). ``cosine``: ``min_lr + (peak - min_lr) · (1 + cos(π s / S)) / 2``.
    ``warmup_cosine``: ``peak · (s + 1) / W`` for the first W steps (:func:`warmup_steps`), then the cosine over
    the remaining ``S - W`` steps. ``warmup_constant``: the same warmup, then the peak.

    Args:
        cfg: the train section.
        step: the step.
        total_steps: the run's length in steps.
        steps_per_epoch: steps in one epoch (for ``train.warmup_epochs``).
        batch: the global batch of one update (for ``train.lr_scaling``).
    """
    lr = peak_lr(cfg, batch)
    warmup = warmup_steps(cfg, steps_per_epoch)
    if cfg.lr_schedule == "constant":
        return lr
    start, span = 0, max(total_steps, 1)
    if cfg.lr_schedule in ("warmup_cosine", "warmup_constant") and warmup > 0:
        if step < warmup:
            return lr * (step + 1) / warmup
        if cfg.lr_schedule == "warmup_constant":
            return lr
        start, span = warmup, max(total_steps - warmup, 1)
    progress = min(max(step - start, 0) / span, 1.0)
    return cfg.min_lr + (lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
