"""Networks: the residual block with named parts, the registry, and the models built from them."""

from lab.nn.block import ResidualBlock
from lab.nn.droppath import DropPath, set_droppath_mode
from lab.nn.mlp import MLPBranch, ResidualMLP
from lab.nn.registry import create_model, list_models, register_model

__all__ = ["DropPath", "MLPBranch", "ResidualBlock", "ResidualMLP", "create_model", "list_models",
           "register_model", "set_droppath_mode"]
