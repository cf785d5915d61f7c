"""Small configs and waiting for job tests."""

import time

from lab.config import ExperimentConfig, apply_overrides


def tiny(**overrides) -> ExperimentConfig:
    base = {"name": "tiny", "model.depth": 4, "model.width": 8, "data.n": 1024, "train.batch_size": 32,
            "train.epochs": 1000, "train.eval_every": 20, "train.log_every": 5}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})


def wait_for(predicate, timeout: float = 60.0) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; returns whether it came true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
