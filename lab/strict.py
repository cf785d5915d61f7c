"""The strict frozen-dataclass engine every config is built on.

A config is a tree of frozen dataclasses whose leaf fields carry bounds and choices in their metadata
(:func:`bounded`); construction validates them (:func:`validate`), so an invalid config cannot exist. Mappings
(YAML, JSON, dotted overrides) become configs through :func:`from_dict` and :func:`apply_overrides`, which refuse an
unknown key by naming it and the valid ones. A section with a field named ``extra`` is *open*: keys it does not
declare are collected there for the section's own check (the model section: its builder's signature). A renamed key
(:data:`RENAMED`) still loads under its old name, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
"""The dataclass :func:`from_dict` builds and :func:`apply_overrides` returns: the one each is given."""
EXTRA = "extra"
"""The field of an open section that holds the keys it does not declare, as ``((key, value), ...)``."""


def _open(cls: type) -> bool:
    return any(f.name == EXTRA for f in dataclasses.fields(cls))


class ConfigError(ValueError):
    """Raised for an unknown key, a wrong type or an out-of-range value; the message says which and why."""


RENAMED: dict[str, tuple[str, str]] = {}
"""Old dotted key → (new dotted key, what the value is): the old key still loads as the new one, with a warning.
The configs that use this engine register their renamed keys here."""


def _caller_stacklevel() -> int:
    """``stacklevel`` that attributes a warning to the first caller outside the config modules (a script, the
    CLI)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__") in _INTERNAL:
        frame, level = frame.f_back, level + 1
    return level


_INTERNAL = {__name__, "lab.config"}


def new_name(old: str, *, new_also_given: bool) -> str:
    """The current dotted key for the renamed key ``old``; warns, or raises if the new key is given as well."""
    new, what = RENAMED[old]
    if new_also_given:
        raise ConfigError(f"{old} and {new} are both given; {old} is the old name of {new}, so give only {new}")
    warnings.warn(f"{old} is deprecated; {what} and is now called {new}", DeprecationWarning,
                  stacklevel=_caller_stacklevel())
    return new


def bounded(default: Any, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
            choices: Iterable[str] | None = None, doc: str = "") -> Any:
    """A config field with its default, bounds (``lo``, exclusive when ``lo_open``; ``hi``), choices and doc."""
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "choices": tuple(choices) if choices else None, "doc": doc}
    if isinstance(default, (list, dict)):
        raise TypeError("mutable defaults are not allowed in a frozen config")
    return field(default=default, metadata=meta)


def describe_range(meta: Mapping[str, Any]) -> str:
    lo, hi = meta.get("lo"), meta.get("hi")
    left = "(" if meta.get("lo_open") else "["
    if lo is not None and hi is not None:
        return f"in {left}{lo}, {hi}]"
    if lo is not None:
        return f"> {lo}" if meta.get("lo_open") else f">= {lo}"
    return f"<= {hi}"


def validate(obj: Any) -> None:
    """Check every field of a config dataclass against its metadata (bounds, choices, finiteness)."""
    section = getattr(obj, "_section", type(obj).__name__)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        meta = f.metadata
        name = f"{section}.{f.name}"
        if value is None:  # an optional field left unset (the model builder's default applies)
            continue
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
                raise ConfigError(f"{name} must be {describe_range(meta)}; got {v}")


def coerce(value: Any, tp: Any, name: str) -> Any:
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
        return tuple(coerce(v, a, name) for v, a in zip(value, args, strict=True))
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
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot, unsigned exponent) as a string
            with contextlib.suppress(ValueError):
                value = float(value)
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
    old_keys = [key for key in data if f"{section}.{key}" in RENAMED]
    if old_keys:
        data = dict(data)
        for key in old_keys:
            new = RENAMED[f"{section}.{key}"][0].rpartition(".")[2]
            new_name(f"{section}.{key}", new_also_given=new in data)
            data[new] = data.pop(key)
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls) if f.name != EXTRA]
    unknown = [k for k in data if k not in valid]
    where = f"{prefix}." if prefix else ""
    kwargs = {k: coerce(v, hints[k], f"{where}{k}") for k, v in data.items() if k in valid}
    if _open(cls):  # the section's own check judges its other keys (the model section: its builder's signature)
        kwargs[EXTRA] = tuple((k, data[k]) for k in unknown)
    elif unknown:
        raise ConfigError(f"unknown key {where}{unknown[0]}; valid keys: {', '.join(where + v for v in valid)}")
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists), ready for YAML or JSON."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and _open(type(v)):  # unset fields are left out; the other keys beside them
            out = {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)
                   if f.name != EXTRA and getattr(v, f.name) is not None}
            return out | {k: plain(value) for k, value in getattr(v, EXTRA)}
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict (:func:`to_dict`, or ``config.json``'s section) as dotted keys:
    ``{"model": {"alpha_min": 0.7}}`` → ``{"model.alpha_min": 0.7}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


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


def apply_overrides(cfg: T, overrides: Iterable[str] | Mapping[str, Any], *,
                    prepare: Callable[[dict[str, Any], list[tuple[str, Any]]], None] | None = None,
                    open_sections: Iterable[str] = ()) -> T:
    """Return a copy of ``cfg`` with dotted overrides applied and the result re-validated.

    A renamed key's old name (:data:`RENAMED`) sets the new key, with a ``DeprecationWarning``.

    Args:
        cfg: a config dataclass instance.
        overrides: ``["model.depth=16", "train.lr=0.01"]`` or ``{"model.depth": 16}``.
        prepare: called with the config as a plain dict and the ``(key, value)`` overrides before they are set
            (the model section drops the keys of a model the overrides replace).
        open_sections: dotted sections that take keys they do not declare (an open section's own check judges them).

    Raises:
        ConfigError: an unknown section or key (naming the valid ones), an invalid value, or a renamed key given
            under both its old and its new name.
    """
    items = list(overrides.items() if isinstance(overrides, Mapping) else (parse_override(o) for o in overrides))
    keys = {key for key, _ in items}
    items = [(new_name(key, new_also_given=RENAMED[key][0] in keys) if key in RENAMED else key, value)
             for key, value in items]
    data = to_dict(cfg)
    if prepare is not None:
        prepare(data, items)
    for key, value in items:
        node, parts = data, key.split(".")
        for depth, part in enumerate(parts):
            path = ".".join(parts[:depth])
            new_open_key = path in open_sections and depth == len(parts) - 1 and isinstance(node, dict)
            if not new_open_key and (not isinstance(node, dict) or part not in node):
                valid = sorted(node) if isinstance(node, dict) else []
                where = f"{path}." if path else ""
                raise ConfigError(f"unknown key {key}; valid keys: {', '.join(where + v for v in valid)}")
            if depth == len(parts) - 1:
                node[part] = value
            else:
                node = node[part]
    return from_dict(type(cfg), data)
