"""Small configs and waiting for job tests."""

import time

from lab.config import ExperimentConfig, apply_overrides
from lab.train.core import Callback
from tests.waiting import deadline


def tiny(**overrides) -> ExperimentConfig:
    base = {"name": "tiny", "model.depth": 4, "model.width": 8, "data.n": 1024, "train.batch_size": 32,
            "train.epochs": 1000, "train.eval_every": 20, "train.log_every": 5}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})


EVERY_SNAPSHOT_S = 1e-9
"""A job's ``disk_every_s`` that writes every snapshot to the run folder (0 writes none): the tiny model trains ten
steps in a few milliseconds, faster than any interval a test could name."""


def wait_for(predicate, timeout: float = 60.0) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds (scaled by the machine's load,
    :func:`tests.waiting.deadline`) pass; returns whether it came true."""
    end = deadline(timeout)
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


class StuckStep(Callback):
    """A training callback whose step ``at`` never ends in time (a long evaluation): it sleeps ``seconds``, first
    making its process ignore SIGTERM when ``deaf`` (as native code that holds the process would), and creating the
    file ``marker`` once stuck."""

    def __init__(self, marker: str, at: int = 3, seconds: float = 120.0, deaf: bool = False) -> None:
        self.marker, self.at, self.seconds, self.deaf = marker, at, seconds, deaf

    def on_step_end(self, trainer, loss) -> None:
        if trainer.step == self.at:
            if self.deaf:  # signal.signal works in the main thread only; the C library's call works here too
                import ctypes
                import signal

                ctypes.CDLL(None).signal(int(signal.SIGTERM), ctypes.c_void_p(1))  # SIG_IGN
            open(self.marker, "w").close()  # noqa: SIM115
            time.sleep(self.seconds)
