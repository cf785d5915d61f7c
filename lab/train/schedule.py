"""Learning rate per optimisation step: ``constant``, ``cosine`` and ``warmup_cosine``.

A pure function of the step, so a run resumed at step s continues on the same curve. The cosine schedules decay
from ``train.lr`` to ``train.min_lr`` over the run's total steps (the Residual Alignment paper trains with cosine
decay, §2.3); ``warmup_cosine`` first rises linearly from 0 over ``train.warmup_steps`` steps (as MAE pretraining).
"""

from __future__ import annotations

import math

from lab.config import TrainConfig


def learning_rate(cfg: TrainConfig, step: int, total_steps: int, *, peak: float | None = None,
                  warmup_steps: int | None = None) -> float:
    """The learning rate of optimisation step ``step`` (0-based) of a run of ``total_steps`` steps.

    ``cosine``: ``min_lr + (lr - min_lr) · (1 + cos(π s / S)) / 2``. ``warmup_cosine``: ``lr · (s + 1) / W`` for
    the first W steps, then the cosine over the remaining ``S - W`` steps.

    Args:
        cfg: the train section.
        step: the step.
        total_steps: the run's length in steps.
        peak: the rate the schedule starts from (after warmup); default ``cfg.lr``. The loader engine passes the
            batch-scaled rate (``train.lr_scaling``).
        warmup_steps: W; default ``cfg.warmup_steps`` (the loader engine adds ``warmup_epochs`` in steps).
    """
    lr = cfg.lr if peak is None else peak
    warmup = cfg.warmup_steps if warmup_steps is None else warmup_steps
    if cfg.lr_schedule == "constant":
        return lr
    start, span = 0, max(total_steps, 1)
    if cfg.lr_schedule == "warmup_cosine" and warmup > 0:
        if step < warmup:
            return lr * (step + 1) / warmup
        start, span = warmup, max(total_steps - warmup, 1)
    progress = min(max(step - start, 0) / span, 1.0)
    return cfg.min_lr + (lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
