"""Small configs for job tests."""

from lab.config import ExperimentConfig, apply_overrides


def tiny(**overrides) -> ExperimentConfig:
    base = {"name": "tiny", "model.depth": 4, "model.width": 8, "data.n": 1024, "train.batch_size": 32,
            "train.epochs": 1000, "train.eval_every": 20, "train.log_every": 5}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})
