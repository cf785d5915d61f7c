"""A curve that keeps a bounded number of points however long its run: every other point goes when it fills up.

A run that logs every step for a million steps, or a metrics file of hundreds of megabytes in a folder from
elsewhere, would otherwise put millions of points into the server's memory and into every browser that shows the
curve. :class:`Thinned` streams points into a Bokeh source until it holds :data:`MAX_POINTS`, then keeps every
other one of them and from then on every second new one (then every fourth, …): what stays is every ``stride``-th
point of the whole series, evenly spaced in the order they came.
"""

from __future__ import annotations

from collections.abc import Sequence

from bokeh.models import ColumnDataSource

MAX_POINTS = 4000
"""The most points one curve holds."""


class Thinned:
    """``source`` (columns ``step`` and ``value``) fed through :meth:`stream`, at most ``limit`` points kept.

    Attributes:
        stride: every how many points of the series one is kept (1 until the first thinning).
    """

    def __init__(self, source: ColumnDataSource, limit: int = MAX_POINTS) -> None:
        self.source, self.limit, self.stride, self._seen = source, limit, 1, 0

    def stream(self, steps: Sequence[float], values: Sequence[float]) -> None:
        """Append the points ``(steps[i], values[i])`` that fall on the stride, thinning when the curve is full."""
        start, self._seen = self._seen, self._seen + len(steps)
        keep = [i for i in range(len(steps)) if (start + i) % self.stride == 0]
        if keep:
            self.source.stream({"step": [steps[i] for i in keep], "value": [values[i] for i in keep]})
        data = self.source.data
        while len(data["step"]) > self.limit:  # every other point goes: those left are every 2·stride-th
            self.stride *= 2
            data = {"step": list(data["step"][::2]), "value": list(data["value"][::2])}
            self.source.data = data

    def clear(self) -> None:
        """Forget every point (the next run's curve starts unthinned)."""
        self.stride, self._seen = 1, 0
        self.source.data = {"step": [], "value": []}
