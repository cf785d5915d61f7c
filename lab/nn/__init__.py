"""Networks: the residual block with named parts, the registry, and the models built from them.

Importing this package registers every model: the residual MLP, the ResNets of *Residual Alignment: Uncovering
the Mechanisms of Residual Networks*, the MAE ViTs and U-ViT diffusion models of *Residual Connections Harm
Generative Representation Learning* (decayed shortcuts, U-Net skips) and the timm adapters.
"""

from lab.nn import diffusion, mae, resnets, timm_adapter  # noqa: F401  (registration side effect)
from lab.nn.block import ResidualBlock
from lab.nn.droppath import DropPath, set_droppath_mode
from lab.nn.mlp import MLPBranch, ResidualMLP
from lab.nn.registry import create_model, list_models, register_model

__all__ = ["DropPath", "MLPBranch", "ResidualBlock", "ResidualMLP", "create_model", "list_models",
           "register_model", "set_droppath_mode"]
