"""Residual Lab: how residual connections shape what deep networks learn."""

from lab.nn import create_model, list_models, register_model

__version__ = "0.1.0"
__all__ = ["__version__", "create_model", "list_models", "register_model"]
