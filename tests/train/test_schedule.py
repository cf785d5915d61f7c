import math

import pytest

from lab.config import TrainConfig
from lab.train.schedule import learning_rate


def test_constant_cosine_and_warmup_cosine():
    assert learning_rate(TrainConfig(lr=0.3), 77, 100) == 0.3
    cos = TrainConfig(lr=0.1, min_lr=0.01, lr_schedule="cosine")
    assert learning_rate(cos, 0, 100) == pytest.approx(0.1)
    assert learning_rate(cos, 50, 100) == pytest.approx(0.01 + 0.09 * 0.5)
    assert learning_rate(cos, 100, 100) == pytest.approx(0.01)
    warm = TrainConfig(lr=0.2, lr_schedule="warmup_cosine", warmup_steps=10)
    assert [learning_rate(warm, s, 110) for s in (0, 4, 9)] == pytest.approx([0.02, 0.1, 0.2])
    assert learning_rate(warm, 10, 110) == pytest.approx(0.2)
    assert learning_rate(warm, 60, 110) == pytest.approx(0.1 * (1 + math.cos(math.pi * 0.5)))
    assert learning_rate(warm, 110, 110) == pytest.approx(0.0, abs=1e-12)


def test_warmup_constant_rises_as_warmup_cosine_then_stays_at_the_peak():
    cfg = TrainConfig(lr=0.2, lr_schedule="warmup_constant", warmup_steps=10)
    assert [learning_rate(cfg, s, 110) for s in (0, 4, 9, 10, 60, 110)] == pytest.approx([0.02, 0.1, 0.2, 0.2, 0.2,
                                                                                           0.2])


def test_warmup_in_epochs_and_a_peak_scaled_by_the_global_batch():
    cfg = TrainConfig(lr=1e-3, lr_scaling="batch256", lr_schedule="warmup_cosine", warmup_epochs=2, warmup_steps=1)
    # W = 1 + 2 epochs of 5 steps = 11; peak = 1e-3 × 1024 / 256
    assert learning_rate(cfg, 0, 100, steps_per_epoch=5, batch=1024) == pytest.approx(4e-3 / 11)
    assert learning_rate(cfg, 10, 100, steps_per_epoch=5, batch=1024) == pytest.approx(4e-3)
    assert learning_rate(TrainConfig(lr=0.1, lr_scaling="batch256"), 3, 10, batch=128) == pytest.approx(0.05)
    assert learning_rate(TrainConfig(lr=0.1), 3, 10, batch=128) == 0.1  # no scaling unless asked
