"""Training: the shared core (callbacks, divergence, seeds), the optimiser rule, the tensor and loader trainers,
droppath and ResidualDroppath (in :mod:`lab.nn.droppath`), and the ensemble trainer that trains many residual MLPs
as one batched computation."""

from lab.train.build import build_data, build_model
from lab.train.core import Callback, Diverged, Trainable, TrainerView, divergence_hint, resolve_device
from lab.train.ensemble import EnsembleCallback, EnsembleMember, EnsembleTrainer, ensemble_groups
from lab.train.optim import make_optimizer
from lab.train.tensor import Trainer

__all__ = ["Callback", "Diverged", "EnsembleCallback", "EnsembleMember", "EnsembleTrainer", "Trainable", "Trainer",
           "TrainerView", "build_data", "build_model", "divergence_hint", "ensemble_groups", "make_optimizer",
           "resolve_device"]
