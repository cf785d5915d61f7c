"""Learning rate per optimisation step: ``constant``, ``cosine`` and ``warmup_cosine``.

A pure function of the step, so a run resumed at step s continues on the same curve. The cosine schedules decay
from ``train.lr`` to ``train.min_lr`` over the run's total steps (the Residual Alignment paper trains with cosine
decay, §2.3); ``warmup_cosine`` first rises linearly from 0 over ``train.warmup_steps`` steps (as MAE pretraining).
"""

from __future__ import annotations

import math

from lab.config import TrainConfig


def learning_rate(cfg: TrainConfig, step: int, total_steps: int) -> float:
    """The learning rate of optimisation step ``step`` (0-based) of a run of ``total_steps`` steps.

    ``cosine``: ``min_lr + (lr - min_lr) · (1 + cos(π s / S)) / 2``. ``warmup_cosine``: ``lr · (s + 1) / W`` for
    the first W steps, then the cosine over the remaining ``S - W`` steps.
    """
    if cfg.lr_schedule == "constant":
        return cfg.lr
    start, span = 0, max(total_steps, 1)
    if cfg.lr_schedule == "warmup_cosine":
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        start, span = cfg.warmup_steps, max(total_steps - cfg.warmup_steps, 1)
    progress = min(max(step - start, 0) / span, 1.0)
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
