"""Work for bounded tasks' tests: module-level, so the child process imports it by name."""

import os
import signal
import time

import torch


def add(a: int, b: int, *, progress) -> int:
    for i in range(3):
        progress(i + 1, 3)
    return a + b


def allocate(gigabytes: float, *, progress) -> int:
    """A memory bomb: one tensor of ``gigabytes``, touched."""
    return int(torch.ones(int(gigabytes * 2**30 / 4)).sum())


def sleep(seconds: float, *, progress) -> None:
    time.sleep(seconds)


def fail(chars: int, *, progress) -> None:
    raise ValueError("x" * chars)


def crash(*, progress) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)
