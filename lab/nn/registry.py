"""Model registry: ``register_model`` on a builder function, ``create_model(name, **overrides)`` to build one.

Each registered model also carries what the lab needs to know of it beyond its knobs (:class:`ModelInfo`): its
family, the task its forward serves — which decides how it trains —, the extras of the lab it needs beyond the core
(so a training that cannot run is refused before its run folder is made: :func:`lab.train.requires.require_extras`)
and a small example the tests build it from, as timm's registry carries each model's default configuration.
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lab.extras import NAMES as EXTRAS

MODEL_TASKS = ("classify", "mae", "diffusion")
"""What a model's forward serves: ``classify`` (``forward(x)`` → logits), ``mae`` (``forward(x)`` → ``(loss, …)`` of
masked images) and ``diffusion`` (``forward(x, y)`` → ``(loss, …)`` at a drawn noise level)."""
Requires = tuple[str, ...] | Callable[[Mapping[str, Any]], tuple[str, ...]]
"""The extras a model needs: always the same ones, or those its knobs need (a function of the builder's keyword
arguments, its defaults filled in: ``lambda knobs: ("diffusion",) if knobs["schedule"] == "discrete" else ()``)."""


@dataclass(frozen=True)
class ModelInfo:
    """What the lab knows of a registered model besides its knobs.

    Attributes:
        family: the family it belongs to (``residual_mlp``, ``resnet``, ``mae_vit``, ``uvit``, ``timm_resnet``).
        task: what its forward serves, one of :data:`MODEL_TASKS`; ``train.task`` must match it.
        example: builder arguments of a small instance, for the tests that build every registered model.
        input_shape: one input's shape for that instance (without the batch axis).
        requires: the extras of the lab (:data:`lab.extras.NAMES`) it needs beyond the core (:data:`Requires`; read
            through :func:`model_extras`).
    """

    family: str
    task: str = "classify"
    example: dict[str, Any] = field(default_factory=dict)
    input_shape: tuple[int, ...] = ()
    requires: Requires = ()


_MODELS: dict[str, Callable[..., nn.Module]] = {}
_INFO: dict[str, ModelInfo] = {}


def register_model(fn: Callable[..., nn.Module] | None = None, *, family: str | None = None, task: str = "classify",
                   example: dict[str, Any] | None = None, input_shape: tuple[int, ...] = (),
                   requires: Requires = ()) -> Callable:
    """Register a builder under its function name; the builder's keyword arguments are the model's knobs.

    Used bare (``@register_model``) or with what the lab should know of the model
    (``@register_model(family="mae_vit", task="mae", example={...}, input_shape=(3, 16, 16))``; :class:`ModelInfo`).

    Raises:
        ValueError: the name is taken, ``task`` is not one of :data:`MODEL_TASKS`, or ``requires`` names an extra the
            lab does not have.
    """
    if task not in MODEL_TASKS:
        raise ValueError(f"task must be one of {', '.join(MODEL_TASKS)}; got {task!r}")
    if not callable(requires):
        requires = tuple(requires)
        _check_extras(requires, "requires")

    def register(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if builder.__name__ in _MODELS:
            raise ValueError(f"model {builder.__name__!r} is already registered")
        _MODELS[builder.__name__] = builder
        _INFO[builder.__name__] = ModelInfo(family or builder.__name__, task, dict(example or {}), input_shape,
                                            requires)
        return builder

    return register(fn) if fn is not None else register


def _check_extras(extras: tuple[str, ...], what: str) -> None:
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        raise ValueError(f"{what} names extras the lab does not have ({', '.join(map(repr, unknown))}); its extras: "
                         f"{', '.join(EXTRAS)}")


def model_extras(name: str, knobs: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The extras a registered model needs with ``knobs`` (its builder's keyword arguments; the builder's defaults
    fill in the others), from its ``requires`` (:class:`ModelInfo`).

    Raises:
        ValueError: ``name`` is not registered, or its ``requires`` gives an extra the lab does not have.
    """
    requires = model_info(name).requires
    if not callable(requires):
        return requires
    defaults = {n: p.default for n, p in model_parameters(name)[0].items() if p.default is not p.empty}
    extras = tuple(requires({**defaults, **(knobs or {})}))
    _check_extras(extras, f"model {name!r}")
    return extras


def model_info(name: str) -> ModelInfo:
    """What the registry knows of a model (:class:`ModelInfo`).

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered models).
    """
    if name not in _INFO:
        raise ValueError(f"unknown model {name!r}; registered: {', '.join(list_models())}")
    return _INFO[name]


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
