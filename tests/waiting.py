"""Waiting in tests: on a condition, never for a fixed time, with deadlines that grow with how busy the machine is.

A deadline only ends a wait that would otherwise hang; the wait itself ends when its condition holds. A busy machine
(the suite's two workers beside other work, a CI runner shared with other jobs) runs everything several times slower,
so a deadline sized on an idle machine is scaled by :func:`slowdown`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

SLOWDOWN_ENV = "LAB_TEST_SLOWDOWN"
"""Environment variable: how many times slower than an idle machine to allow (a number ≥ 1); unset, the load decides."""


def slowdown() -> float:
    """How many times longer than on an idle machine the tests' work may take now: ``LAB_TEST_SLOWDOWN`` when set,
    else the runnable processes per core (the larger of the 1- and 5-minute load averages over the core count), at
    least 1. Read at each call: the load changes while the suite runs."""
    text = os.environ.get(SLOWDOWN_ENV, "").strip()
    if text:
        return max(1.0, float(text))
    try:
        load = max(os.getloadavg()[:2])
    except OSError:  # no load average on this system
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def scaled(seconds: float) -> float:
    """``seconds`` of an idle machine's time, on this machine now (a timeout to hand to another API)."""
    return seconds * slowdown()


def deadline(seconds: float) -> float:
    """The :func:`time.monotonic` time by which work that takes ``seconds`` on an idle machine is done here."""
    return time.monotonic() + scaled(seconds)


def wait_until(predicate: Callable[[], bool], seconds: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` every ``interval`` seconds until it is true (returns True) or the :func:`deadline` of
    ``seconds`` passes (returns False); the predicate is asked once more at the deadline."""
    end = deadline(seconds)
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
