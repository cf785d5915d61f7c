"""Residual Lab: how residual connections shape what deep networks learn.

The package's names are imported when first used, so that a program reading run folders (:mod:`lab.runfolder`)
does not import torch.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "create_model", "list_models", "register_model"]


def __getattr__(name: str) -> Any:
    if name in ("create_model", "list_models", "register_model"):
        return getattr(import_module("lab.nn"), name)
    raise AttributeError(f"module 'lab' has no attribute {name!r}")
