"""The signals that end a training started from the command line (``train``, ``resume``, ``sweep``) cleanly."""

from __future__ import annotations

import signal

from lab.train.core import Callback, TrainerView


class Terminate(Callback):
    """SIGTERM/SIGINT end the run cleanly as ``stopped`` after the current step (a checkpoint is kept)."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame) -> None:
        if self.requested and signum == signal.SIGINT:  # Ctrl-C twice: give up at once
            raise KeyboardInterrupt
        self.requested = True  # a scheduler's SIGTERM may come twice (itself and torchrun): one request

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        if self.requested:
            trainer.should_stop = True
