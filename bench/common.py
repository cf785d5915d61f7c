"""Helpers shared by the benchmarks: timing and table printing (benchmarks are scripts, not tests)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def timed(fn: Callable[[], object], repeats: int = 5) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn``."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with right-aligned columns (:func:`lab.reproduce.throughput.text_table`)."""
    from lab.reproduce.throughput import text_table

    return text_table(headers, rows)
