"""Residual Lab: how residual connections shape what deep networks learn.

The package's names are imported when first used, so that a program reading run folders (:mod:`lab.runfolder`)
does not import torch.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["Analysis", "__version__", "analyze", "create_model", "list_models", "register_model"]
_HOMES = {"create_model": "lab.nn", "list_models": "lab.nn", "register_model": "lab.nn",
          "analyze": "lab.reports.lenses", "Analysis": "lab.reports.lenses"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'lab' has no attribute {name!r}")
