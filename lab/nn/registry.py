"""Model registry: ``register_model`` on a builder function, ``create_model(name, **overrides)`` to build one."""

from __future__ import annotations

import fnmatch
import inspect
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


def signature_of(target: Callable, *, drop: tuple[str, ...] = (), **defaults) -> Callable[[Callable], Callable]:
    """Give a ``(**kwargs)`` builder the keyword signature of the class or function it delegates to.

    The registry reads a builder's signature to validate a config's model keys (:func:`model_parameters`), so a
    variant such as ``ra_type4a(**kwargs) -> FCResNet(depth=8, width=512, **kwargs)`` must show FCResNet's
    parameters with its own defaults.

    Args:
        target: what the builder calls.
        drop: parameters the builder fixes itself (not settable).
        **defaults: parameters whose default the builder changes.
    """
    params = [p.replace(default=defaults.get(p.name, p.default)) for p in inspect.signature(target).parameters.values()
              if p.name not in drop and p.name != "self"]

    def decorate(fn: Callable) -> Callable:
        fn.__signature__ = inspect.Signature(params)
        return fn

    return decorate


def model_parameters(name: str) -> tuple[dict[str, inspect.Parameter], bool]:
    """The keyword arguments of a registered model's builder, and whether it also takes arbitrary ones.

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered models).
    """
    if name not in _MODELS:
        raise ValueError(f"unknown model {name!r}; registered: {', '.join(list_models())}")
    params = inspect.signature(_MODELS[name]).parameters
    named = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return named, any(p.kind is p.VAR_KEYWORD for p in params.values())


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
