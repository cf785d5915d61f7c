"""Stopping a run from outside its process: the ``STOP`` entry of a run folder, which the training watches."""

from __future__ import annotations

import time

from lab.runs import layout
from lab.runs.store import Run
from lab.train.core import Callback, TrainerView

STOP_FILE = layout.STOP


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
            if self.path.exists():
                trainer.should_stop = True
