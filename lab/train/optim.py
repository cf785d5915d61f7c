"""The optimiser of every trainer, and which parameters weight decay applies to.

One rule for the tensor, loader and ensemble trainers, set by ``train.weight_decay_on``:

- ``weights`` (default): timm's rule (``timm.optim.param_groups_weight_decay``, as timm's training script and the
  MAE reference code apply it): 1-D parameters (norms), biases and the names a model's ``no_weight_decay()``
  returns are not decayed; every other parameter is. The MAE's cls and mask tokens are decayed, as in the
  reference code.
- ``all``: every parameter is decayed, the loss ``L + λ/2 ‖θ‖²`` over all parameters of *Residual Alignment:
  Uncovering the Mechanisms of Residual Networks* (Eq. 1).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.config import TrainConfig


def param_groups(model: nn.Module, weight_decay: float, on: str = "weights") -> list[dict[str, Any]]:
    """The parameter groups of ``model`` under the rule ``on`` (see the module docstring).

    Groups that decay come first (the loader engine's checkpoints hold their optimiser state in that order); with
    ``weight_decay`` 0 or ``on="all"`` there is one group, every trainable parameter in module order.

    Args:
        model: the model; its ``no_weight_decay()``, when it has one, names parameters never decayed.
        weight_decay: λ.
        on: ``weights`` or ``all``.

    Returns:
        ``[{"params": [...], "weight_decay": λ or 0.0}, ...]``.
    """
    if on not in ("weights", "all"):
        raise ValueError(f"unknown weight-decay rule {on!r}; valid: weights, all")
    if on == "all" or not weight_decay:  # timm's groups too when λ = 0: one, every parameter, undecayed
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    from timm.optim import param_groups_weight_decay  # here: importing timm takes seconds (not needed for λ = 0)

    skip = tuple(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else ()
    groups = param_groups_weight_decay(model, weight_decay, no_weight_decay_list=skip)
    return sorted(groups, key=lambda g: g["weight_decay"] == 0.0)  # stable: decayed first


def decayed(model: nn.Module, on: str = "weights") -> dict[str, bool]:
    """Per parameter name, whether weight decay applies to it under the rule ``on`` (whatever λ is)."""
    groups = param_groups(model, 1.0, on)
    decays = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    return {name: id(p) in decays for name, p in model.named_parameters() if p.requires_grad}


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD (with ``train.momentum``) over :func:`param_groups`, at ``train.lr``.

    Adam adds λθ to the gradient (L2 regularisation), AdamW shrinks θ by ``lr · λ`` (decoupled weight decay), SGD
    adds λθ to the gradient before momentum (the gradient of λ/2 ‖θ‖²).

    Every one updates its parameters with PyTorch's ``foreach`` kernels, also on the CPU (where PyTorch's default
    is a Python loop over the parameters): the same update, and about 0.5 ms less per step of the 32-block spiral
    MLP, whose 66 small tensors made the loop a twelfth of the step (``bench/train_spiral.py``).
    """
    groups = param_groups(model, cfg.weight_decay, cfg.weight_decay_on)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, foreach=True)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, betas=cfg.betas, foreach=True)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, foreach=True)
