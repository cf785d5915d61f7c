"""Which CPU cores the lab's training children keep to themselves, machine-wide.

On a small machine the lab's server, a browser and a toy run share a few cores. A child niced below the server (so
that the sessions' callbacks come first) is preempted by every frame the server and the browser handle: on two cores
it trains at about 0.8 of a bare loop while the Playground draws it, though it loses only a few per cent of its CPU
time (``bench/playground_live.py``). A child that keeps cores of its own, at the server's priority, trains at about
0.9 while the server and the browser use the others. So a CPU child takes as many cores as it runs torch threads when
that many are free and at least :data:`SPARE` stay for everyone else.

Cores are kept only while every CPU child has its own. A child that finds too few free runs on every core, niced,
and says that it waits; every child that holds cores then gives them up and runs niced too, so that the server comes
first again when training oversubscribes the machine (two runs drawn on two cores: ``bench/server_load.py``). A
niced child stays niced for the rest of its run: raising a process's priority again takes a privilege that a lab's
user does not have.

A core is held by an exclusive ``flock`` on its own file in the ledger (:func:`ledger`), a waiting child by a shared
lock on ``waiting.lock``, each taken by the child itself: the kernel drops a child's locks when it exits, however it
ends (a crash or SIGKILL included). The ledger is the user's own folder (mode 0700, outside the shared temp folder),
shared by that user's servers and notebook kernels and by no one else: in a world-writable folder another user could
hold its locks, plant FIFOs or links in it, and stall or redirect every child. No lock is ever waited for without a
bound, and no file in it is opened through a link or as anything but a regular file; a runtime folder that is not
safely the user's own is passed over for the user's cache folder, and where neither is, children take no cores and
run niced, as they do on a machine without pinning.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import IO

PROBE_S = 0.05
"""The longest a child waits for ``probing.lock`` (held by another prober for microseconds); past it, it takes
others to be waiting."""


def ledger() -> Path | None:
    """The user's ledger folder (``<cpu>.lock`` per core, ``waiting.lock``, ``probing.lock``): the lab's private
    folder ``cores`` (:func:`~lab.runfolder.lock.private_folder`: in the runtime folder where that is the user's alone,
    else in the user's cache folder); None when neither is the user's alone, and then no child takes a core. Asked by
    the server, which hands the folder to its children."""
    from lab.runfolder.lock import private_folder  # here: a child loads this module alone, before torch

    return private_folder("cores")


SPARE = 1
"""Cores never taken: left to the server, the browser and the rest of the machine (the lowest-numbered ones)."""
WAIT_S = 0.1
"""How long a child that finds too few cores free looks again before it settles for running niced: the run a page
replaces (Reset, then Start) gives its cores back when its child reads the stop, within a poll of it."""


def candidates(spare: int = SPARE) -> list[int]:
    """The cores a child may take, highest first: this process's CPUs less the ``spare`` lowest (core 0 also takes
    most interrupts). Empty where the system does not say which CPUs a process may use (not Linux)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []
    return cpus[spare:][::-1]


class Placement:
    """Where this process trains: on ``threads`` cores of its own while every CPU child has its own, else on every
    core, ``nice`` lower in priority than it started.

    Made in the child before it starts a thread (they inherit its placement); :meth:`check` between polls gives the
    cores up once another child waits for some; :meth:`release` (asked to stop) hands them to the run that replaces
    this one.

    Args:
        threads: the cores it keeps busy (its torch threads); 0 takes none and waits for none (a GPU run).
        nice: how much lower its priority is when it has no cores of its own.
        locks: the ledger's folder (:func:`ledger`; None: no ledger, so no core of its own).
        wait: how long to look again while too few cores are free.
    """

    def __init__(self, threads: int, nice: int, locks: Path | None, wait: float = WAIT_S) -> None:
        self.locks, self.nice = locks, nice
        self._cores: dict[int, IO[bytes]] = {}  # core → its locked file
        self._waiting: IO[bytes] | None = None
        if locks is None:  # no ledger of the user's own (:func:`ledger`): no core of its own either
            threads = 0
        else:
            with contextlib.suppress(OSError):
                locks.mkdir(mode=0o700, parents=True, exist_ok=True)
        if threads > 0 and not self._others_wait():
            self._cores = _take(threads, locks, wait)
        if self._cores:
            self._everywhere = os.sched_getaffinity(0)
            try:
                os.sched_setaffinity(0, self.cpus)
            except OSError:  # a container that forbids it: then no core is its own
                self.release()
        if not self._cores:
            os.nice(nice)
            if threads > 0:  # a shared lock held as long as this child lives: every holder yields
                self._waiting = _lock(locks / "waiting.lock", shared=True)

    @property
    def cpus(self) -> frozenset[int]:
        """The cores it holds (none: it runs niced on every core)."""
        return frozenset(self._cores)

    def check(self) -> None:
        """Give the cores up, and run niced on every core from now on, if another child waits for cores."""
        if not self._cores or not self._others_wait():
            return
        priority = os.getpriority(os.PRIO_PROCESS, 0) + self.nice
        for tid in os.listdir("/proc/self/task"):  # per thread on Linux: training, snapshots, writers
            with contextlib.suppress(OSError):  # a thread that has just ended
                os.sched_setaffinity(int(tid), self._everywhere)
                os.setpriority(os.PRIO_PROCESS, int(tid), priority)
        self.release()

    def release(self) -> None:
        """Give up the cores and stop waiting (closing a lock file drops its lock)."""
        for file in [*self._cores.values(), *([self._waiting] if self._waiting else [])]:
            file.close()
        self._cores, self._waiting = {}, None

    def _others_wait(self) -> bool:
        """Whether another child holds ``waiting.lock`` shared: tried exclusively under ``probing.lock``, which every
        prober takes and no waiter does, so that two children probing at once do not take each other for a waiter.
        Either lock not had within :data:`PROBE_S`: taken as someone waiting (the sessions come first)."""
        if self.locks is None:
            return False
        probe = _lock(self.locks / "probing.lock", wait=PROBE_S)
        if probe is None:
            return True
        try:
            mine = _lock(self.locks / "waiting.lock")
            if mine is not None:
                mine.close()
            return mine is None
        finally:
            probe.close()


def _take(n: int, locks: Path, wait: float) -> dict[int, IO[bytes]]:
    """The locked files of ``n`` cores by core, looking again for up to ``wait`` s while too few are free; none when
    ``n`` cannot be taken."""
    cpus = candidates()
    if len(cpus) < n:
        return {}
    deadline = time.monotonic() + wait
    while True:
        files: dict[int, IO[bytes]] = {}
        for cpu in cpus:
            if (file := _lock(locks / f"{cpu}.lock")) is not None:
                files[cpu] = file
                if len(files) == n:
                    return files
        for file in files.values():
            file.close()
        if time.monotonic() >= deadline:
            return {}
        time.sleep(0.02)


def _lock(path: Path, *, shared: bool = False, wait: float = 0.0) -> IO[bytes] | None:
    """``path`` open and locked (exclusively unless ``shared``), trying again for up to ``wait`` s; None when another
    process holds it, or it is not a regular file of its own (a link, a FIFO, a device), or cannot be opened or
    locked (no ``fcntl``: not a POSIX system). Never blocks: the file is opened without following a link and without
    waiting on a FIFO, and the lock is only ever tried."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    file = os.fdopen(fd, "r+b")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        file.close()
        return None
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return file
        except OSError:
            if time.monotonic() >= deadline:
                file.close()
                return None
            time.sleep(0.005)
