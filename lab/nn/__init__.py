"""Networks: the residual block with named parts, the registry, and the models built from them.

Importing this package imports every module in it, which registers every model: the residual MLP, the ResNets of
*Residual Alignment: Uncovering the Mechanisms of Residual Networks*, the MAE ViTs and U-ViT diffusion models of
*Residual Connections Harm Generative Representation Learning* (decayed shortcuts, U-Net skips) and the timm
adapters. A new model is one new module here: its ``@register_model`` builder registers it on import; a model from
another package comes in as a plugin (:mod:`lab.plugins`), loaded last.
"""

import importlib
import pkgutil

from lab import plugins
from lab.nn.block import ResidualBlock
from lab.nn.droppath import DropPath, set_droppath_mode
from lab.nn.mlp import MLPBranch, ResidualMLP
from lab.nn.registry import create_model, list_models, register_model

for _module in pkgutil.iter_modules(__path__):  # registration side effect
    importlib.import_module(f"{__name__}.{_module.name}")
plugins.load(plugins.MODELS)  # models of other packages, and of $LAB_PLUGINS, in every process that builds one

__all__ = ["DropPath", "MLPBranch", "ResidualBlock", "ResidualMLP", "create_model", "list_models",
           "register_model", "set_droppath_mode"]
