"""From a config to the objects a run needs: the model and the data (one function each, no hidden state)."""

from __future__ import annotations

from torch import nn

from lab.config import ExperimentConfig
from lab.data.toy2d import ToyData, make_toy_data
from lab.nn.registry import create_model


def build_model(cfg: ExperimentConfig) -> nn.Module:
    """The model of ``cfg.model``, initialised from ``cfg.model.seed``, with ``cfg.train``'s drop-path rate."""
    m = cfg.model
    drop_path_rate = cfg.train.drop_path_rate if cfg.train.droppath != "off" else 0.0
    return create_model(m.name, seed=m.seed, depth=m.depth, width=m.width, in_dim=m.in_dim,
                        num_classes=m.num_classes, activation=m.activation, shortcut=m.shortcut,
                        alpha_min=m.alpha_min, zero_init=m.zero_init, drop_path_rate=drop_path_rate)


def build_data(cfg: ExperimentConfig) -> ToyData:
    """The train/test split of ``cfg.data``."""
    return make_toy_data(cfg.data)
