"""When a job builds a snapshot of each kind: the one rule every publisher follows.

A kind is due every N training steps and/or every T seconds after its last snapshot (either may be 0, off), never twice
at one step. A kind may be on demand: due only once it has also been asked for (:meth:`Cadence.request`, from any
thread), and one request is used up by one snapshot, so a page that asks for the next snapshot after drawing the last
one gets no snapshot it will not draw. A forced snapshot (training start, pause, end) is due regardless.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping


class Cadence:
    """Per-kind timing of snapshots.

    Args:
        every: per kind, ``(every_n_steps, every_t_seconds)``; either may be 0 (off).
        on_demand: kinds that are due only when also requested; a request is used up by the next snapshot.
    """

    def __init__(self, every: Mapping[str, tuple[int, float]], on_demand: Iterable[str] = ()) -> None:
        self.every = dict(every)
        self.on_demand = frozenset(on_demand)
        self._wanted: set[str] = set()
        self._lock = threading.Lock()
        self._last: dict[str, tuple[int, float]] = {}

    @property
    def kinds(self) -> list[str]:
        """The kinds with a cadence, in the order they were given."""
        return list(self.every)

    def request(self, kind: str) -> None:
        """Ask for the next due snapshot of ``kind`` (any thread)."""
        with self._lock:
            self._wanted.add(kind)

    def due(self, kind: str, step: int, *, force: bool = False, now: float | None = None) -> bool:
        """Whether a snapshot of ``kind`` is due at training ``step`` (``now``: a :func:`time.monotonic` reading).

        A forced snapshot is always due. Otherwise the kind is due when it has no snapshot yet, or its last snapshot was
        at another step and at least N steps or T seconds ago; an on-demand kind also needs a pending request.
        """
        if force:
            return True
        last = self._last.get(kind)
        if last is not None:
            every_steps, every_s = self.every[kind]
            now = time.monotonic() if now is None else now
            elapsed = (every_steps and step - last[0] >= every_steps) or (every_s and now - last[1] >= every_s)
            if last[0] == step or not elapsed:
                return False
        if kind in self.on_demand:
            with self._lock:
                return kind in self._wanted
        return True

    def built(self, kind: str, step: int, *, now: float | None = None) -> None:
        """A snapshot of ``kind`` was built at ``step`` (at ``now``; default: this moment): the next one is counted
        from here, and the pending request, if any, is used up."""
        self._last[kind] = (step, time.monotonic() if now is None else now)
        with self._lock:
            self._wanted.discard(kind)
