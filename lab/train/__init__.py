"""Training, one home: every training's entry (:func:`lab.train.runner.train_and_evaluate`), the shared core (the
one callback type, divergence, seeds), the optimiser rule, the tensor and loader trainers and their tasks, droppath
and ResidualDroppath (in :mod:`lab.nn.droppath`), the ensemble trainer that trains many residual MLPs as one batched
computation, and what a training writes into its run folder (recorder, checkpoints, STOP, resume)."""

from lab.train.build import build_data, build_model
from lab.train.core import Callback, Diverged, Trainable, TrainerView, divergence_hint, resolve_device
from lab.train.ensemble import EnsembleMember, EnsembleTrainer, ensemble_groups
from lab.train.optim import make_optimizer
from lab.train.tensor import Trainer

__all__ = ["Callback", "Diverged", "EnsembleMember", "EnsembleTrainer", "Trainable", "Trainer",
           "TrainerView", "build_data", "build_model", "divergence_hint", "ensemble_groups", "make_optimizer",
           "resolve_device"]
