"""Model registry: ``register_model`` on a builder function, ``create_model(name, **overrides)`` to build one."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

import torch
from torch import nn

_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """Register a builder under its function name; the builder's keyword arguments are the model's knobs."""
    if fn.__name__ in _MODELS:
        raise ValueError(f"model {fn.__name__!r} is already registered")
    _MODELS[fn.__name__] = fn
    return fn


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern, sorted."""
    return sorted(n for n in _MODELS if fnmatch.fnmatch(n, pattern))


def create_model(name: str, *, seed: int | None = None, **overrides) -> nn.Module:
    """Build a registered model.

    Args:
        name: a name from :func:`list_models`.
        seed: if given, the parameters are initialised from this seed without touching the global RNG, so the
            initialisation is reproducible and independent of the data and batch seeds.
        **overrides: the builder's keyword arguments (depth, width, shortcut, alpha_min, ...).
    """
    if name not in _MODELS:
        raise ValueError(f"unknown model {name!r}; registered: {', '.join(list_models())}")
    builder = _MODELS[name]
    if seed is None:
        return builder(**overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return builder(**overrides)
