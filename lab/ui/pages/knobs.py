"""A page's settings in one table: each knob's parameter (default, bounds, doc), sidebar group, and config key.

The table drives everything a setting touches: the page's parameters and their bounds, the sidebar groups, the
names in the URL query, the experiment config the page trains, and whether changing it means a new model
(training settings) or only a redraw (view settings). A value from the URL that the bounds refuse is not dropped
silently: :func:`apply_url_values` uses the nearest allowed value and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import param

from lab.data.toy2d import TOY_DATASETS
from lab.ui.text import clipped, code

TEXT_CHARS = 1000
"""The longest text a page's field takes (a path, a network's name, a list of values), from the URL or the page alike:
checked on the server, where the value arrives, before any path work (the browser's own limit binds only a browser)."""


@dataclass(frozen=True)
class Knob:
    """One setting of a page.

    Attributes:
        parameter: the ``param`` parameter (default, bounds or choices, doc, label).
        group: the sidebar section it is shown in.
        key: the dotted config key it sets (``"model.depth"``), or None when it sets none.
        training: whether a change needs a new model (else it only redraws).
        to_config: maps ``(value, page)`` to the config value (default: the value itself).
    """

    parameter: param.Parameter
    group: str
    key: str | None = None
    training: bool = True
    to_config: Callable[[Any, Any], Any] | None = None


class BoundedText(param.String):
    """A text parameter that refuses a value longer than :attr:`chars` characters, with a short ValueError (param's
    own errors quote the whole value: a megabyte of it)."""

    __slots__ = ["chars"]

    def __init__(self, default: str = "", *, chars: int = TEXT_CHARS, **params: Any) -> None:
        self.chars = chars  # before the default is validated
        super().__init__(default=default, **params)

    def _validate_value(self, value: Any, allow_None: bool) -> None:
        if isinstance(value, str) and len(value) > self.chars:
            raise ValueError(f"{self.name}: {len(value):,} characters, where at most {self.chars:,} are taken")
        super()._validate_value(value, allow_None)


def bounded_text(default: str = "", doc: str = "", chars: int = TEXT_CHARS) -> BoundedText:
    """A :class:`BoundedText` of at most ``chars`` characters."""
    return BoundedText(default, doc=doc, chars=chars)


def toy_data_knobs(seed: str = "data_seed") -> dict[str, Knob]:
    """The toy 2-D data settings every page that trains on them shares (new parameters per call: each page class
    needs its own). ``seed`` names the data-seed knob."""
    return {
        "dataset": Knob(param.Selector(default="spiral", objects=list(TOY_DATASETS), doc="toy 2-D set"), "Data",
                        "data.name"),
        "n": Knob(param.Integer(default=4096, bounds=(100, 16384), doc="samples (half per class)"), "Data",
                  "data.n", to_config=lambda v, page: v + v % 2),
        "noise": Knob(param.Number(default=0.0, bounds=(0.0, 0.5), step=0.01, doc="noise level"), "Data",
                      "data.noise"),
        "train_fraction": Knob(param.Number(default=0.8, bounds=(0.1, 1.0), step=0.05,
                                            doc="share used for training"), "Data", "data.train_fraction"),
        seed: Knob(param.Integer(default=0, bounds=(0, 2**31 - 1), doc="seed of the data and its split"), "Data",
                   "data.seed"),
    }


def knob_class(name: str, knobs: Mapping[str, Knob], base: type) -> type:
    """A subclass of ``base`` declaring one parameter per knob (pages derive from it)."""
    return type(name, (base,), {n: k.parameter for n, k in knobs.items()})


def groups(knobs: Mapping[str, Knob]) -> dict[str, list[str]]:
    """Knob names by sidebar group, in table order."""
    out: dict[str, list[str]] = {}
    for n, k in knobs.items():
        out.setdefault(k.group, []).append(n)
    return out


def training_names(knobs: Mapping[str, Knob]) -> tuple[str, ...]:
    return tuple(n for n, k in knobs.items() if k.training)


def view_names(knobs: Mapping[str, Knob]) -> tuple[str, ...]:
    return tuple(n for n, k in knobs.items() if not k.training)


def config_overrides(page: param.Parameterized, knobs: Mapping[str, Knob]) -> dict[str, Any]:
    """``{config key: value}`` of every knob that sets one, read from ``page``."""
    out = {}
    for n, k in knobs.items():
        if k.key is not None:
            value = getattr(page, n)
            out[k.key] = k.to_config(value, page) if k.to_config else value
    return out


def nearest_allowed(p: param.Parameter, value: Any) -> Any:
    """The value ``p`` accepts that is closest to ``value`` (its default when nothing is closer)."""
    if isinstance(p, param.Selector):
        return value if value in p.objects else p.default
    if isinstance(p, param.Range):
        lo, hi = p.bounds or (None, None)
        try:
            a, b = (float(v) for v in value)
        except (TypeError, ValueError):
            return p.default
        a, b = (min(max(v, lo), hi) if lo is not None else v for v in (a, b))
        return (type(p.default[0])(a), type(p.default[1])(b)) if a < b else p.default
    if isinstance(p, param.Number):
        try:
            v = float(value)
        except (TypeError, ValueError):
            return p.default
        if v != v:  # NaN
            return p.default
        lo, hi = p.bounds or (None, None)
        v = v if lo is None else max(v, lo)
        v = v if hi is None else min(v, hi)
        return int(round(v)) if isinstance(p, param.Integer) else v
    return p.default


def _allowed(p: param.Parameter) -> str:
    if isinstance(p, BoundedText):
        return f"at most {p.chars:,} characters"
    if isinstance(p, param.Selector):
        return "one of " + ", ".join(map(str, p.objects))
    if getattr(p, "bounds", None):
        return f"in [{p.bounds[0]}, {p.bounds[1]}]"
    return "valid"


def apply_url_values(page: param.Parameterized, values: Mapping[str, Any]) -> dict[str, str]:
    """Set ``values`` (from the URL query) on ``page`` one by one; a refused value is replaced by the nearest
    allowed one. Returns, per replaced value, a notice naming the field, the allowed range and the value used (as
    Markdown: the URL's value is quoted as text, its first characters only)."""
    notices = {}
    for name, value in values.items():
        try:
            setattr(page, name, value)
        except Exception:  # param raises ValueError or TypeError for out-of-range or ill-typed values
            p = page.param[name]
            used = nearest_allowed(p, value)
            setattr(page, name, used)
            notices[name] = f"{code(clipped(f'{name}={value}'))}: {name} must be {_allowed(p)}; using {used}."
    return notices


def clamp_link(values: Mapping[str, Any], limits: Mapping[str, float]) -> tuple[dict[str, Any], dict[str, str]]:
    """The sizes in ``values`` (a link's query) above ``limits`` lowered to them: returns the lowered values and, for
    each, a notice (Markdown) saying what the link asked and what is used."""
    lowered, notices = {}, {}
    for name, limit in limits.items():
        if name not in values:
            continue
        try:
            asked = float(values[name])
        except (TypeError, ValueError):
            continue  # not a number: the page's own check refuses it and says so
        if asked > limit:
            lowered[name] = int(limit) if float(limit).is_integer() else limit
            asked_text = code(clipped(f"{name}={values[name]}"))
            notices[name] = (f"{asked_text}: a link may ask at most {code(lowered[name])}, which is used; a larger "
                             "value can be set on the page")
    return lowered, notices
