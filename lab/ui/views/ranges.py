"""Plot ranges fitted to data: the finite values with a margin on each side, so no point sits on a frame's edge,
and set on a figure in place."""

from __future__ import annotations

import math

import numpy as np
from bokeh.models import Range1d
from numpy.typing import ArrayLike


def finite_range(*values: ArrayLike, pad: float = 0.05, least: float = 0.0, point: float = 0.05,
                 floor: float | None = None, log: bool = False,
                 empty: tuple[float, float] | None = (0.0, 1.0)) -> tuple[float, float] | None:
    """The range ``(start, end)`` around the finite values of ``values`` (NaN and ±inf are left out).

    The margin on each side is ``pad`` times the values' span, at least ``least``. Values that are all one value
    ``v`` get ``pad · |v|`` (at least ``least``), or ``point`` when that is zero, so a range is never empty.

    Args:
        *values: arrays (any shape) or scalars; all of them together are fitted.
        pad: margin as a fraction of the span.
        least: smallest margin.
        point: margin of a lone zero (every value 0, and ``least`` 0).
        floor: the range starts at or below this value (e.g. 0 for bars and spectra).
        log: fit the positive values on a log axis (the margin is in decades; ``floor`` is a value, not a decade).
        empty: the range when no value is finite (None: the caller keeps its range).

    Returns:
        ``(start, end)``, or ``empty`` when there is nothing to fit.
    """
    v = np.concatenate([np.asarray(a, np.float64).ravel() for a in values]) if values else np.zeros(0)
    v = v[np.isfinite(v)]
    if log:
        v = np.log10(v[v > 0])
    if not len(v):
        return empty
    lo, hi = float(v.min()), float(v.max())
    if floor is not None:
        lo = min(lo, math.log10(floor) if log else floor)
    span = hi - lo
    margin = max(pad * (span if span > 0 else abs(hi)), least) or point
    start, end = lo - margin, hi + margin
    return (10.0 ** start, 10.0 ** end) if log else (start, end)


def set_range(rng: Range1d, bounds: tuple[float, float] | None) -> None:
    """Move ``rng`` (a figure's x or y range) to ``bounds``; None leaves it where it is."""
    if bounds is not None:
        rng.update(start=bounds[0], end=bounds[1])
