"""Training: the callback trainer, droppath and ResidualDroppath (in :mod:`lab.nn.droppath`), run entry points, and
the ensemble trainer that trains many residual MLPs as one batched computation."""

from lab.train.build import build_data, build_model
from lab.train.ensemble import EnsembleCallback, EnsembleMember, EnsembleTrainer, ensemble_groups
from lab.train.tensor import Callback, Diverged, Trainer, divergence_hint, make_optimizer, resolve_device

__all__ = ["Callback", "Diverged", "EnsembleCallback", "EnsembleMember", "EnsembleTrainer", "Trainer", "build_data",
           "build_model", "divergence_hint", "ensemble_groups", "make_optimizer", "resolve_device"]
