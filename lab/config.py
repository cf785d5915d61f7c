"""Experiment configuration: frozen dataclasses, YAML round-trip and strict dotted overrides.

A config is a tree of frozen dataclasses. Every leaf field may carry bounds or a set of choices in its metadata;
construction validates them, so an invalid config cannot exist. Loading from a mapping is strict: an unknown key
is an error that names itself and the valid keys, because a silently ignored typo (``model.alpha_mni=0.5``) is a
wasted experiment. A renamed key is the one exception: its old name still loads, as the new key, with a
``DeprecationWarning`` (``train.drop_rate`` is now ``train.drop_path_rate``); giving both names is an error.

Example:
    >>> cfg = load_config("configs/spiral.yaml", ["model.depth=16", "train.lr=0.01"])
    >>> cfg.model.depth
    16
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
import typing
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from lab.data.toy2d import TOY_DATASETS
from lab.nn.mlp import ACTIVATIONS
from lab.shortcuts import SCHEDULES

T = TypeVar("T")

DROPPATH_MODES = ("off", "droppath", "residual_droppath")
OPTIMIZERS = ("adam", "adamw", "sgd")


class ConfigError(ValueError):
    """Raised for an unknown key, a wrong type or an out-of-range value; the message says which and why."""


# Old dotted key -> (new dotted key, what the value is). The old key still loads as the new one, with a warning.
_RENAMED = {
    "train.drop_rate": ("train.drop_path_rate", "it is the drop-path rate"),
}


def _caller_stacklevel() -> int:
    """``stacklevel`` that attributes a warning to the first caller outside this module (a script, the CLI)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


def _new_name(old: str, *, new_also_given: bool) -> str:
    """The current dotted key for the renamed key ``old``; warns, or raises if the new key is given as well."""
    new, what = _RENAMED[old]
    if new_also_given:
        raise ConfigError(f"{old} and {new} are both given; {old} is the old name of {new}, so give only {new}")
    warnings.warn(f"{old} is deprecated; {what} and is now called {new}", DeprecationWarning,
                  stacklevel=_caller_stacklevel())
    return new


def _field(default: Any, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           choices: Iterable[str] | None = None, doc: str = "") -> Any:
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "choices": tuple(choices) if choices else None, "doc": doc}
    if isinstance(default, (list, dict)):
        raise TypeError("mutable defaults are not allowed in a frozen config")
    return field(default=default, metadata=meta)


def _describe_range(meta: Mapping[str, Any]) -> str:
    lo, hi = meta.get("lo"), meta.get("hi")
    left = "(" if meta.get("lo_open") else "["
    if lo is not None and hi is not None:
        return f"in {left}{lo}, {hi}]"
    if lo is not None:
        return f"> {lo}" if meta.get("lo_open") else f">= {lo}"
    return f"<= {hi}"


def _validate(obj: Any) -> None:
    """Check every field of a config dataclass against its metadata (bounds, choices, finiteness)."""
    section = getattr(obj, "_section", type(obj).__name__)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        meta = f.metadata
        name = f"{section}.{f.name}"
        if meta.get("choices") and value not in meta["choices"]:
            raise ConfigError(f"{name} must be one of {', '.join(meta['choices'])}; got {value!r}")
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{name} must be a finite number; got {v}")
            lo, hi = meta.get("lo"), meta.get("hi")
            too_low = lo is not None and (v <= lo if meta.get("lo_open") else v < lo)
            too_high = hi is not None and v > hi
            if too_low or too_high:
                raise ConfigError(f"{name} must be {_describe_range(meta)}; got {v}")


@dataclass(frozen=True)
class ModelConfig:
    """The network: a registered model name and its architecture knobs."""

    _section = "model"
    name: str = _field("residual_mlp", doc="registered model name (lab.list_models())")
    depth: int = _field(32, lo=1, hi=1024, doc="number of residual blocks L")
    width: int = _field(32, lo=1, hi=65536, doc="hidden width H")
    activation: str = _field("gelu", choices=ACTIVATIONS)
    shortcut: str = _field("identity", choices=SCHEDULES, doc="alpha schedule (lab.shortcuts)")
    alpha_min: float = _field(1.0, lo=0.0, hi=1.0, doc="last block's shortcut scale for decayed schedules")
    zero_init: bool = _field(False, doc="zero-initialise each branch's output layer (Residual Connections Harm "
                                        "Generative Representation Learning, §3.2)")
    in_dim: int = _field(2, lo=1)
    num_classes: int = _field(2, lo=1)
    seed: int = _field(0, lo=0, doc="initialisation seed, kept apart from data and batch seeds")

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True)
class DataConfig:
    """A toy 2-D dataset and its train/test split."""

    _section = "data"
    name: str = _field("spiral", choices=TOY_DATASETS)
    n: int = _field(16384, lo=2, hi=10_000_000, doc="number of samples, half per class")
    noise: float = _field(0.0, lo=0.0, hi=10.0, doc="noise level (Gaussian std for the spiral of ResidualDroppath: "
                                                     "Enhancing Feature Reuse over Residual Connections)")
    train_fraction: float = _field(0.8, lo=0.0, hi=1.0, lo_open=True)
    seed: int = _field(0, lo=0, doc="seed for sampling the data and splitting it")

    def __post_init__(self) -> None:
        _validate(self)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, regularisation and evaluation cadence."""

    _section = "train"
    optimizer: str = _field("adam", choices=OPTIMIZERS)
    lr: float = _field(0.01, lo=0.0, hi=100.0, lo_open=True)
    betas: tuple[float, float] = _field((0.9, 0.999), lo=0.0, hi=1.0)
    weight_decay: float = _field(0.0, lo=0.0)
    momentum: float = _field(0.9, lo=0.0, hi=1.0, doc="SGD only")
    batch_size: int = _field(256, lo=1)
    epochs: int = _field(6, lo=1)
    max_steps: int = _field(0, lo=0, doc="stop after this many steps; 0 = no limit beyond epochs")
    droppath: str = _field("off", choices=DROPPATH_MODES)
    drop_path_rate: float = _field(0.0, lo=0.0, hi=1.0, doc="drop-path rate: probability of dropping a block's "
                                                              "branch per sample (timm's drop_path_rate)")
    eval_every: int = _field(0, lo=0, doc="evaluate every N steps; 0 = once per epoch")
    log_every: int = _field(10, lo=1, doc="record the training loss every N steps")
    seed: int = _field(0, lo=0, doc="seed for batch order and droppath masks")
    device: str = _field("auto", doc="'auto' (CUDA when present), 'cpu' or 'cuda[:i]'")
    threads: int = _field(1, lo=0, doc="torch CPU threads; the toy models' small matmuls run fastest on one "
                                       "(and leave a core to a server); 0 keeps torch's default")

    def __post_init__(self) -> None:
        if len(self.betas) != 2:
            raise ConfigError(f"train.betas must have two values; got {list(self.betas)}")
        _validate(self)
        if self.droppath != "off" and self.drop_path_rate >= 1.0:
            raise ConfigError("train.drop_path_rate must be < 1 when droppath is on (every branch would be dropped)")


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: a name plus the model, data and train sections."""

    _section = "experiment"
    name: str = "spiral"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/\\\0"):
            raise ConfigError(f"name must be non-empty and free of path separators; got {self.name!r}")


# ---------------------------------------------------------------------------------------------------------------
# Mapping <-> dataclass, strictly.


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Convert a YAML/JSON/override value to the field's declared type, or raise ConfigError naming the field."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name} must be a mapping of {tp.__name__} fields; got {value!r}")
        return from_dict(tp, value, prefix=name)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} must be a list of {len(args)} values; got {value!r}")
        if len(value) != len(args):
            raise ConfigError(f"{name} must have {len(args)} values; got {list(value)}")
        return tuple(_coerce(v, a, name) for v, a in zip(value, args, strict=True))
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name} must be true or false; got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise ConfigError(f"{name} must be an integer; got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number; got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string; got {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], *, prefix: str = "") -> T:
    """Build config dataclass ``cls`` from a mapping, rejecting unknown keys.

    A renamed key's old name (``train.drop_rate``) is read as the new one with a ``DeprecationWarning``.

    Args:
        cls: a config dataclass type.
        data: plain values (from YAML or JSON); nested sections as mappings.
        prefix: dotted path of this section, used in error messages.

    Raises:
        ConfigError: an unknown key (the message lists the valid ones), a wrong type, an out-of-range value, or
            a renamed key given under both its old and its new name.
    """
    section = getattr(cls, "_section", "")
    old_keys = [key for key in data if f"{section}.{key}" in _RENAMED]
    if old_keys:
        data = dict(data)
        for key in old_keys:
            new = _RENAMED[f"{section}.{key}"][0].rpartition(".")[2]
            _new_name(f"{section}.{key}", new_also_given=new in data)
            data[new] = data.pop(key)
    hints = _hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in valid]
    where = f"{prefix}." if prefix else ""
    if unknown:
        raise ConfigError(f"unknown key {where}{unknown[0]}; valid keys: {', '.join(where + v for v in valid)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}{k}") for k, v in data.items()}
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists), ready for YAML or JSON."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``"model.depth=16"`` into ``("model.depth", 16)``; the value is parsed as YAML (numbers, lists, bools)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: cannot parse value: {err}") from None
    if isinstance(value, bool) and raw.strip().lower() not in ("true", "false"):
        value = raw.strip()  # YAML 1.1 reads off/on/yes/no as booleans; `train.droppath=off` means the string
    return key, value


def apply_overrides(cfg: T, overrides: Iterable[str] | Mapping[str, Any]) -> T:
    """Return a copy of ``cfg`` with dotted overrides applied and the result re-validated.

    A renamed key's old name (``train.drop_rate``) sets the new key, with a ``DeprecationWarning``.

    Args:
        cfg: a config dataclass instance.
        overrides: ``["model.depth=16", "train.lr=0.01"]`` or ``{"model.depth": 16}``.

    Raises:
        ConfigError: an unknown section or key (naming the valid ones), an invalid value, or a renamed key given
            under both its old and its new name.
    """
    items = list(overrides.items() if isinstance(overrides, Mapping) else (parse_override(o) for o in overrides))
    keys = {key for key, _ in items}
    items = [(_new_name(key, new_also_given=_RENAMED[key][0] in keys) if key in _RENAMED else key, value)
             for key, value in items]
    data = to_dict(cfg)
    for key, value in items:
        node, parts = data, key.split(".")
        for depth, part in enumerate(parts):
            path = ".".join(parts[:depth])
            if not isinstance(node, dict) or part not in node:
                valid = sorted(node) if isinstance(node, dict) else []
                where = f"{path}." if path else ""
                raise ConfigError(f"unknown key {key}; valid keys: {', '.join(where + v for v in valid)}")
            if depth == len(parts) - 1:
                node[part] = value
            else:
                node = node[part]
    return from_dict(type(cfg), data)


def load_config(path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()) -> ExperimentConfig:
    """Load an experiment config from YAML (or JSON) and apply dotted overrides; no path gives the defaults."""
    cfg = ExperimentConfig()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        cfg = from_dict(ExperimentConfig, data or {})
    return apply_overrides(cfg, overrides)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write a config as YAML (or JSON for a ``.json`` path) that :func:`load_config` reads back equal."""
    path = Path(path)
    data = to_dict(cfg)
    text = json.dumps(data, indent=2) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
