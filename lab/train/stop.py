"""Stopping a run from outside its process: the ``STOP`` entry of a run folder, which the training watches."""

from __future__ import annotations

import contextlib
import os
import time

from lab.runfolder import layout
from lab.runs.store import Run
from lab.train.core import Callback, TrainerView

STOP_FILE = layout.STOP


def request_stop(run: Run) -> None:
    """Ask ``run`` to stop after its current step: create its ``STOP`` entry (never through a link already there,
    which could make or touch a file anywhere)."""
    path = run.path / STOP_FILE
    if not os.path.lexists(path):
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))


class StopFile(Callback):
    """Stop training when ``<run>/STOP`` appears (checked at most every ``every_s`` seconds)."""

    def __init__(self, run: Run, every_s: float = 0.2) -> None:
        self.path, self.every_s, self._t = run.path / STOP_FILE, every_s, 0.0

    def on_train_start(self, trainer: TrainerView) -> None:
        self.path.unlink(missing_ok=True)  # left by the stop this run is resumed from: not a request to this start

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        now = time.monotonic()
        if now - self._t >= self.every_s:
            self._t = now
            if os.path.lexists(self.path):
                trainer.should_stop = True
