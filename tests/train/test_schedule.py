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
