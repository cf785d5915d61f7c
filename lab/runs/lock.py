"""One process trains a run at a time: ``<run>/lock`` names the holder (host, pid, since) while it trains.

Two ``lab resume`` of one run (two terminals, a requeued cluster job beside a manual one) would append the same
steps twice to ``metrics.jsonl`` and race on the checkpoints. The lock file is made with ``O_CREAT | O_EXCL``, so
exactly one process gets it. A lock whose holder is gone is stale: on the same host a pid that no longer exists
(a process killed with ``kill -9`` leaves its lock behind), and it is taken over. A holder on another host cannot
be checked from here; the message names it and says how to remove the lock once that process is known to be gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from types import TracebackType

from lab.runs import layout

LOCK = layout.LOCK


class RunLocked(RuntimeError):
    """Another live process trains this run; the message names it."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def read_holder(run_path: Path) -> dict | None:
    """The lock's record (``host``, ``pid``, ``since``), or None when the run is not locked; an unreadable lock
    reads as ``{}`` (held by someone unknown)."""
    try:
        fd = os.open(run_path / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        try:
            record = json.loads(f.read())
        except ValueError:
            return {}
    return record if isinstance(record, dict) else {}


def is_stale(holder: dict) -> bool:
    """Whether ``holder`` is a process of this host that no longer exists."""
    pid = holder.get("pid")
    return holder.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)


class RunLock:
    """``with RunLock(run.path):`` holds the run's lock for the block; the file goes when the block ends.

    Raises:
        RunLocked: on entry, when a live process (or one on another host) holds the lock.
    """

    def __init__(self, run_path: Path) -> None:
        self.path = run_path / LOCK
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        self.held = False

    def acquire(self) -> None:
        # the check-then-replace of a stale lock is serialised by an flock on a guard file, so two processes that
        # both find the same stale lock cannot both take it over (the kernel drops the flock if one dies). The
        # guard lives in the temp folder, keyed by the run's path: a refused process writes nothing into the run.
        key = hashlib.sha256(str(self.path.parent.resolve()).encode()).hexdigest()[:24]
        guard_path = Path(tempfile.gettempdir()) / f"residual-lab-{key}.lock"
        fd = os.open(guard_path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                self._acquire()
            finally:
                fcntl.flock(guard, fcntl.LOCK_UN)

    def _acquire(self) -> None:
        for _ in range(3):  # a stale lock is moved away, then the exclusive create is tried again
            tmp = self.path.with_name(f".{LOCK}.{os.getpid()}.tmp")  # the whole record, then linked into place:
            tmp.write_text(json.dumps(self.record))  # a lock file is never seen empty or half-written
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                holder = read_holder(self.path.parent)
                if holder is None:
                    continue  # released in between
                if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
                    raise RunLocked(f"{self.path.parent} is already being trained by this process") from None
                if not is_stale(holder):
                    raise RunLocked(_held_message(self.path, holder)) from None
                with contextlib.suppress(FileNotFoundError):
                    os.replace(self.path, self.path.with_name(f".{LOCK}.stale-{holder.get('pid')}"))
                continue
            finally:
                tmp.unlink(missing_ok=True)
            self.held = True
            return
        raise RunLocked(f"could not take the lock {self.path}: it keeps being renewed by other processes")

    def release(self) -> None:
        if self.held:
            self.held = False
            holder = read_holder(self.path.parent)
            if holder is not None and holder.get("pid") == self.record["pid"]:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            for stale in self.path.parent.glob(f".{LOCK}.stale-*"):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _held_message(path: Path, holder: dict) -> str:
    if not holder:
        return (f"{path.parent} is locked by a process this one cannot identify ({path} is unreadable); remove "
                f"{path} once no process trains the run")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
    where = "this host" if holder.get("host") == socket.gethostname() else f"host {holder.get('host')}"
    return (f"{path.parent} is being trained by process {holder.get('pid')} on {where} (since {since}); wait for it "
            f"or stop it (a STOP file in the run folder, or SIGTERM). If that process is gone, remove {path}")
