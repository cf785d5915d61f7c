"""One process trains a run at a time: ``<run>/lock`` names the holder (host, pid, since) while it trains.

Two ``lab resume`` of one run (two terminals, a requeued cluster job beside a manual one) would append the same
steps twice to ``metrics.jsonl`` and race on the checkpoints. The lock file is made with ``O_CREAT | O_EXCL``, so
exactly one process gets it. A lock whose holder is gone is stale: on the same host a pid that no longer exists
(a process killed with ``kill -9`` leaves its lock behind), and it is taken over. A holder on another host cannot
be checked from here; the message names it and says how to remove the lock once that process is known to be gone.

Nothing is written through a planted file: the record is written to a new temp file made with ``O_CREAT | O_EXCL``
(never an existing file or link) inside the run, then linked into place; a lock that is a link, a named pipe or
unreadable names itself as the holder's problem and is never followed or waited on. The take-over of a stale lock is
serialised by a guard file in a folder of this user's own (:func:`private_folder`: mode 0700, outside the shared
temp folder, so no other user can make, hold or refuse it), waited on
for at most :data:`GUARD_WAIT_S` seconds, naming the process that holds it, and removed when it is released.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import stat
import tempfile
import time
from pathlib import Path
from types import TracebackType

from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, read_json

log = logging.getLogger(__name__)

LOCK = layout.LOCK
GUARD_WAIT_S = 10.0
"""How long a process waits for another one's take-over of a stale lock before it gives up, naming that process."""


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
    """The lock's record (``host``, ``pid``, ``since``), or None when the run is not locked; a lock that cannot be
    read (a link, a named pipe, not JSON) reads as ``{"problem": why}`` (held by someone unknown)."""
    try:
        record = read_json(run_path / LOCK, LIMITS[LOCK])
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        return {"problem": str(err)}
    return record if isinstance(record, dict) else {"problem": "it does not hold a JSON object"}


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

    def acquire(self, wait_s: float = GUARD_WAIT_S) -> None:
        """Take the lock (see the class); ``wait_s`` bounds the wait for another process's take-over."""
        # the check-then-replace of a stale lock is serialised by an flock on a guard file, so two processes that
        # both find the same stale lock cannot both take it over (the kernel drops the flock if one dies). The
        # guard lives in this user's own folder, keyed by the run's path: a refused process writes nothing into
        # the run
        with _guard(_guard_path(self.path.parent), wait_s, self.path.parent):
            self._acquire()

    def _acquire(self) -> None:
        for _ in range(3):  # a stale lock is moved away, then the exclusive create is tried again
            # the whole record in a new file of its own, then linked into place: a lock file is never seen empty or
            # half-written, and nothing planted in the run (a link named like the temp file) is written through
            fd, name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{LOCK}.", suffix=".tmp")
            tmp = Path(name)
            os.fchmod(fd, 0o644)  # readable by whoever lists the run, as every entry of a run folder
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self.record))
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
                with contextlib.suppress(OSError):  # gone already, or not a file: left as it is
                    stale.unlink()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def remove_stale(run_path: Path, wait_s: float = GUARD_WAIT_S) -> bool:
    """Remove the run's lock when it names a process of this host that is gone (a child killed while it trained),
    so the folder no longer reads as trained by someone; returns whether it did. Serialised with a take-over by the
    same guard; a guard that cannot be had leaves the lock as it is (the next start takes it over)."""
    try:
        with _guard(_guard_path(run_path), wait_s, run_path):
            holder = read_holder(run_path)
            if holder is None or not is_stale(holder):
                return False
            (run_path / LOCK).unlink(missing_ok=True)
            return True
    except (RunLocked, PermissionError):
        return False


def _guard_path(run_path: Path) -> Path:
    """The guard file of ``run_path``'s lock in this user's own folder, keyed by the run's path."""
    key = hashlib.sha256(str(run_path.resolve()).encode()).hexdigest()[:24]
    return guard_folder() / f"{key}.lock"


def private_folder(name: str) -> Path | None:
    """This user's own folder ``name`` for the lab's machine-local state (lock guards, the cores ledger), made with
    mode 0700: ``$XDG_RUNTIME_DIR/residual-lab/<name>`` where that is set and safely this user's, else
    ``~/.cache/residual-lab/<name>``; never in the shared temp folder, where another user can make the folder first and
    hold, plant or refuse what goes in it.

    A folder is used only when no one else can have made or changed it (:func:`_own_folder`): the base folder and
    ``residual-lab`` owned by this user and writable by no one else, ``<name>`` also closed to others
    (:func:`is_private`), neither of these two a link. A runtime folder that fails this (one others may write, as a
    misconfigured system leaves it, where another user could make ``residual-lab/<name>`` first) is passed over, with
    a warning, for the cache folder. None when that one fails too.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    bases = [Path(runtime)] if os.path.isabs(runtime) and os.path.isdir(runtime) else []
    for base in [*bases, Path.home() / ".cache"]:
        folder = _own_folder(base, name, create_base=base not in bases)
        if folder is not None:
            return folder
        if base in bases:
            _warn_once(f"{base / 'residual-lab' / name} is not a folder of this user's alone (it, or the folders above "
                       "it, may be another user's, a link or open to others): the lab's lock guards and cores ledger "
                       "are kept under ~/.cache/residual-lab instead")
    return None


def _own_folder(base: Path, name: str, *, create_base: bool) -> Path | None:
    """``base/residual-lab/name``, made where missing (``residual-lab`` and ``name`` with mode 0700), or None when
    ``base`` or ``residual-lab`` is not this user's or others may write it, or ``name`` is not :func:`is_private`.
    ``base`` may be a link (a home's ``.cache`` on another disk) to a folder of this user's."""
    with contextlib.suppress(OSError):
        if create_base:
            base.mkdir(parents=True, exist_ok=True)
    if not _owned(base, follow=True):
        return None
    parent = base / "residual-lab"
    with contextlib.suppress(OSError):
        parent.mkdir(mode=0o700)
    if not _owned(parent, follow=False):
        return None
    folder = parent / name
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700)
    return folder if is_private(folder) else None


def _owned(folder: Path, *, follow: bool) -> bool:
    """Whether ``folder`` is a directory owned by this user that no one else may write (``follow``: through a link);
    no one else can then add, remove or replace what it holds."""
    try:
        st = os.stat(folder) if follow else os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """Log ``message`` once per process (a folder is looked up at every lock)."""
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


def is_private(folder: Path) -> bool:
    """Whether ``folder`` is a directory (not a link) owned by this user that no one else may enter or write."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def guard_folder() -> Path:
    """This user's folder for lock guards (:func:`private_folder`).

    Raises:
        PermissionError: that folder is not this user's own private folder: its guards could be held or planted by
            someone else.
    """
    folder = private_folder("locks")
    if folder is None:
        raise PermissionError("the lab's folder for lock guards in this user's runtime or cache folder is not a "
                              "private folder of this user (mode 0700, owned by uid "
                              f"{os.getuid()}): lock guards are not kept there; remove it")
    return folder


@contextlib.contextmanager
def _guard(path: Path, wait_s: float, run: Path):
    """Hold an exclusive flock on the guard file ``path`` for the block, waiting at most ``wait_s`` seconds; the file
    holds the holder's pid and goes when the block ends (a waiter that then finds its file gone tries anew)."""
    deadline = time.monotonic() + wait_s
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                        raise RunLocked(f"{run} is being taken over by process {holder} of this user, which has held "
                                        f"the guard {path} for more than {wait_s:g} s; try again when it is done, "
                                        "or stop that process") from None
                    time.sleep(0.02)
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # its holder removed it while this one waited: take the new one
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            try:
                yield
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            return
        finally:
            os.close(fd)  # drops the flock


def _held_message(path: Path, holder: dict) -> str:
    if "pid" not in holder:
        return (f"{path.parent} is locked by a process this one cannot identify ({holder.get('problem', 'unreadable')}"
                f"); remove {path} once no process trains the run")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
    where = "this host" if holder.get("host") == socket.gethostname() else f"host {holder.get('host')}"
    return (f"{path.parent} is being trained by process {holder.get('pid')} on {where} (since {since}); wait for it "
            f"or stop it (a STOP file in the run folder, or SIGTERM). If that process is gone, remove {path}")
