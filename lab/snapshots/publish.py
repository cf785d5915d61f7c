"""Publishing snapshots: the training callback that builds each kind when its cadence says it is due and hands
the snapshot to the job, and the sink that keeps snapshots in the run folder.

Each kind has its own cadence (:class:`~lab.snapshots.cadence.Cadence`) because costs differ: node maps are one forward
pass of the grid; layer similarity needs a Gram matrix. A kind can be on demand: built only when due and asked for,
so snapshots nobody will draw cost nothing. What a kind holds, and whether a snapshot is fit to publish, is its
builder's (:mod:`lab.snapshots.builders`). A view is optional and training is not: a builder that raises (a plugin
model without ``forward_intermediates`` has no node maps) drops its kind for the run, with a note that names the kind
and the error (:mod:`lab.jobs.notes`), and the other kinds and the training go on.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable

import numpy as np
from torch import nn

from lab.runs.store import error_text
from lab.snapshots.builders import Builder, judged
from lab.snapshots.cadence import Cadence
from lab.snapshots.kinds import default_builders, default_cadence
from lab.snapshots.shadow import ShadowBuilds
from lab.snapshots.snapshot import Snapshot
from lab.train.core import Callback, TrainerView


class Publisher(Callback):
    """Build snapshots on a per-kind cadence and hand them to ``sink(kind, payload)``.

    Args:
        sink: receives each published payload (with ``step`` added); a job's memory slot or the run folder.
        cadence: per kind, ``(every_n_steps, every_t_seconds)``; either may be 0 (off). Default: the kinds'
            own (:func:`~lab.snapshots.kinds.default_cadence`).
        builders: snapshot builders by kind; each judges its own snapshots (:func:`~lab.snapshots.builders.judged`).
            Default: the kinds' own (:func:`~lab.snapshots.kinds.default_builders`).
        on_demand: kinds built only when due and requested (:meth:`request`); a request is used up by one build.
            A forced publish (start, pause, end) builds them regardless.
        beside: build the snapshots due at a step from a copy of the model, on a thread of their own
            (:class:`~lab.snapshots.shadow.ShadowBuilds`), so training goes on meanwhile. Snapshots are taken at the
            same steps as without: a step at which kinds fall due while the last build still runs waits for it (no
            longer than building on the training thread would have taken). A forced publish builds from the model
            itself, after the running build: the snapshot a run paused or ended with is exactly its model, and the
            last. The sink is then called from the builder thread.
        noted: called with the note on a kind dropped because its builder raised (:meth:`drop`; a
            :class:`~lab.jobs.notes.NotedRun`'s ``note``); without it the note is a ``RuntimeWarning``.

    Attributes:
        dropped: the note on each kind dropped, by kind; such a kind is never built again by this publisher.
    """

    def __init__(self, sink: Callable[[str, dict[str, np.ndarray]], None],
                 cadence: dict[str, tuple[int, float]] | None = None, builders: dict[str, Builder] | None = None,
                 on_demand: Iterable[str] = (), beside: bool = False,
                 noted: Callable[[str], None] | None = None) -> None:
        self.sink, self.noted = sink, noted
        self.dropped: dict[str, str] = {}
        self.beside = ShadowBuilds() if beside else None
        self.cadence = Cadence(default_cadence() if cadence is None else cadence, on_demand)
        builders = default_builders() if builders is None else builders
        missing = [k for k in self.cadence.kinds if k not in builders]
        if missing:
            raise ValueError(f"no snapshot builder for {missing}; known: {', '.join(builders)}")
        self.builders = {kind: judged(builder) for kind, builder in builders.items()}

    def request(self, kind: str) -> None:
        """Ask for the next due snapshot of ``kind`` (any thread)."""
        self.cadence.request(kind)

    def on_train_start(self, trainer: TrainerView) -> None:
        self.publish(trainer, force=True)

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        self.publish(trainer)

    def on_train_end(self, trainer: TrainerView) -> None:
        self.publish(trainer, force=True)

    def close(self) -> None:
        """End the builder thread of a publisher that builds ``beside`` training, once its running build has
        ended (the training is over, ended or failed)."""
        if self.beside is not None:
            self.beside.close()

    def publish(self, trainer: TrainerView, force: bool = False) -> None:
        """Build every kind that is due (all of them when forced) and hand the snapshots their builders keep to
        the sink; a snapshot a builder refuses leaves the last good one in place, and a builder that raises drops its
        kind (:meth:`drop`)."""
        now = time.monotonic()
        due = [kind for kind in self.cadence.kinds
               if kind not in self.dropped and self.cadence.due(kind, trainer.step, force=force, now=now)]
        if not due:
            return
        for kind in due:
            self.cadence.built(kind, trainer.step, now=now)
        step = trainer.step

        def build(model: nn.Module) -> None:
            for kind in due:
                if kind in self.dropped:  # by the build before this one, after this one fell due
                    continue
                try:
                    payload = self.builders[kind](model)
                except Exception as err:  # a view the model cannot give: the run trains on without it
                    self.drop(kind, err)
                    continue
                if payload is not None:
                    payload["step"] = np.int64(step)
                    self.sink(kind, Snapshot(kind, payload, forced=force))

        if self.beside is None:
            build(trainer.model)
            return
        self.beside.drain()  # a step where kinds are due waits for the last build: snapshots stay at their steps
        if force:
            build(trainer.model)
        else:
            self.beside.submit(trainer.model, build)

    def drop(self, kind: str, err: Exception) -> None:
        """Build ``kind`` no more, its builder having raised ``err``; say so (``noted``) in a note that names both."""
        note = f"{kind} snapshots are off for this run: their builder raised {error_text(err)}"
        self.dropped[kind] = note
        if self.noted is not None:
            self.noted(note)
        else:
            warnings.warn(note, RuntimeWarning, stacklevel=2)


FLOAT16_MAX = float(np.finfo(np.float16).max)


def compact(payload: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Halve the disk size of large float arrays (node maps) by storing them as float16. An array with a value beyond
    float16's range (±65504: a model on its way to diverging) stays float32, so a finite value is never stored as
    inf."""
    def small(v: object) -> bool:
        return (isinstance(v, np.ndarray) and v.dtype == np.float32 and v.size > 4096
                and not max(v.max(initial=0.0), -v.min(initial=0.0)) > FLOAT16_MAX)

    return {k: (v.astype(np.float16) if small(v) else v) for k, v in payload.items()}


class DiskSink:
    """Write snapshots into a run folder at most every ``every_s`` seconds per kind, pruning old ones; a forced
    snapshot (training started, paused or ended) is always written: it is the state a run stopped at, which a replay
    of the run must find, however short the run."""

    def __init__(self, run, every_s: float = 2.0, keep_last: int = 3, keep_history: int = 24) -> None:
        self.run, self.every_s, self.keep_last, self.keep_history = run, every_s, keep_last, keep_history
        self._t: dict[str, float] = {}

    def __call__(self, kind: str, payload: dict[str, np.ndarray]) -> None:
        now = time.monotonic()
        if now - self._t.get(kind, -1e18) < self.every_s and not getattr(payload, "forced", False):
            return
        self._t[kind] = now
        self.run.save_snapshot(kind, int(payload["step"]), compact(payload))
        self.run.prune_snapshots(kind, keep_last=self.keep_last, keep_history=self.keep_history)
