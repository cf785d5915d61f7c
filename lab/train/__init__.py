"""Training: the callback trainer, droppath and ResidualDroppath (in :mod:`lab.nn.droppath`), run entry points."""

from lab.train.build import build_data, build_model
from lab.train.trainer import Callback, Diverged, Trainer, divergence_hint, make_optimizer, resolve_device

__all__ = ["Callback", "Diverged", "Trainer", "build_data", "build_model", "divergence_hint", "make_optimizer",
           "resolve_device"]
