"""Snapshots built beside training: from a copy of the model taken between two steps, on a thread of their own.

A node-maps snapshot of the 32 × 32 Playground model costs 7–14 ms, its layer similarity about 90 ms, a training
step about 6 ms. Built on the training thread at the cadence a page asks for (the Playground's was one per 10
steps), every snapshot stopped training for its whole build (``bench/jobs.py`` measures the job both ways). Here the
training thread only copies the model's tensors into a *shadow* (a deep copy made once; refreshing it copies 34 thousand
numbers for that model, well under a millisecond) and goes on training, while the snapshot is built from the shadow
on a builder thread; torch and numpy release the GIL while they compute, so the two threads run on two cores.

The shadow holds the model's state as PyTorch defines it, its parameters and buffers (what its ``state_dict``
holds); every model of the lab keeps all its training state there (an α is a fixed float of the config). One build
runs at a time, over the shadow, so a copy never lands in the middle of a build: a snapshot due while the last one
is still being built waits for it.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable

import torch
from torch import nn


class ShadowBuilds:
    """Run ``build(shadow)`` on a builder thread, ``shadow`` a copy of a model at the moment :meth:`submit` was
    called.

    An error raised by a build is raised again on the submitting thread, at its next :meth:`submit`,
    :meth:`idle` or :meth:`drain`, as it would be on the training thread. The publisher drops a kind whose builder
    raised (with a note), so what fails the run here is the sink's own error (a snapshot the disk would not take).
    """

    def __init__(self) -> None:
        self._shadow: nn.Module | None = None
        self._source: nn.Module | None = None  # the model the shadow copies
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._todo: queue.SimpleQueue[Callable[[nn.Module], None] | None] = queue.SimpleQueue()
        self._done = threading.Event()
        self._done.set()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def idle(self) -> bool:
        """Whether no build is running (then :meth:`submit` may be called)."""
        self._raise()
        return self._done.is_set()

    def drain(self) -> None:
        """Wait for the running build, if any, to end."""
        self._done.wait()
        self._raise()

    def submit(self, model: nn.Module, build: Callable[[nn.Module], None]) -> None:
        """Copy ``model``'s parameters and buffers into the shadow and start ``build(shadow)`` on the builder thread.

        Raises:
            RuntimeError: a build is still running (call :meth:`idle` first).
        """
        if not self.idle():
            raise RuntimeError("a snapshot is still being built from the shadow")
        self._copy(model)
        self._done.clear()
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="lab-snapshots", daemon=True)
            self._thread.start()
        self._todo.put(build)

    def close(self) -> None:
        """Let the running build end, then end the builder thread (a later :meth:`submit` starts another)."""
        self._done.wait()
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join()
            self._thread = None

    @torch.no_grad()
    def _copy(self, model: nn.Module) -> None:
        if model is not self._source:
            self._shadow, self._source = copy.deepcopy(model), model
            for p in self._shadow.parameters():
                p.grad = None  # the shadow is only ever evaluated
            self._pairs = list(zip(self._tensors(self._shadow), self._tensors(model), strict=True))
            return
        for shadow, live in self._pairs:
            shadow.copy_(live)

    @staticmethod
    def _tensors(model: nn.Module) -> list[torch.Tensor]:
        return [*model.parameters(), *model.buffers()]

    def _main(self) -> None:
        while (build := self._todo.get()) is not None:
            try:
                build(self._shadow)
            except BaseException as err:  # raised again on the training thread
                self._error = err
            finally:
                self._done.set()

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err
