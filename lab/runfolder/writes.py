"""How the lab writes into a run folder: whole files atomically (a reader sees the old or the new, never half), logs
by appending (never through a link or into a pipe), and JSON strictly (no NaN or Infinity tokens). The reading side
is :mod:`lab.runfolder.entries`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from lab.runfolder.entries import EntryError

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_json", "json_text", "open_append", "own_folder",
           "remove_unfinished", "strict_json"]


TMP_SUFFIX = ".tmp"
"""The suffix of a file :func:`atomic_path` has not finished (``.<name>.<random>.tmp``)."""


@contextlib.contextmanager
def atomic_path(path: Path, *, durable: bool = False) -> Iterator[BinaryIO]:
    """``with atomic_path(path) as f:`` writes ``f``, a binary file, in place of ``path`` when the block ends
    without an exception: readers see the old file or the new one, never half of it, and a killed process leaves
    only a temp file (``.<name>.<random>.tmp``, removed by :func:`remove_unfinished`), which an exception also
    removes. The one way the lab replaces a file (JSON, checkpoints, samples, latents, figures). ``durable`` adds an
    fsync, so the file also survives a power cut (worth it for checkpoints, not for once-a-second heartbeats).

    The folder is opened without following a link, and the temp file (a new one, made with ``O_EXCL``, never an
    existing file or link) and the rename act inside that opened folder: a folder of a run (its ``checkpoints/``,
    ``analysis/``) that someone replaced by a link to elsewhere is never written through.

    Raises:
        EntryError: ``path``'s folder is a link or not a folder (nothing is written).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise EntryError(f"{path.parent} is a link or not a folder: nothing is written into it") from None
        raise
    tmp = f".{path.name}.{secrets.token_hex(8)}{TMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Replace ``path`` by ``data`` (:func:`atomic_path`).

    Raises:
        EntryError: ``path``'s folder is a link or not a folder (nothing is written).
    """
    with atomic_path(path, durable=durable) as f:
        f.write(data)


def own_folder(path: Path, *, private: bool = False) -> Path:
    """``path``, made if missing, once checked to be a real folder (not a link) before anything is written into it
    (a reproduction's ``runs/`` and ``logs/``); ``private``: also owned by this user and closed to others (made
    0700: a ``jobs/`` folder whose pickled jobs a cluster node runs).

    Raises:
        EntryError: it is a link, not a folder, or (``private``) another user's or open to others.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700 if private else 0o777, parents=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise EntryError(f"{path} is a link or not a folder: nothing is written into it")
    if private and (st.st_uid != os.getuid() or st.st_mode & 0o077):
        raise EntryError(f"{path} is not yours alone (owner {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): what it "
                         "holds would run as you; remove it, or choose another folder")
    return path


def remove_unfinished(folder: Path) -> int:
    """Remove the temp files :func:`atomic_path` left in ``folder`` when its process was killed mid-write
    (only ``.<name>.<random>.tmp`` regular files; never through a link); returns how many. Call it only where no
    other process writes (a run's own training, holding its lock)."""
    removed = 0
    with contextlib.suppress(OSError):
        if os.path.islink(folder):
            return 0
        for entry in os.scandir(folder):
            if entry.name.startswith(".") and entry.name.endswith(TMP_SUFFIX) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
    return removed


def open_append(path: Path) -> int:
    """A file descriptor appending to the regular file ``path`` (created 0644 if missing). A run folder from
    elsewhere may hold a link or a named pipe under an entry's name: a link is never written through and a pipe
    never waited on.

    Raises:
        EntryError: ``path`` is a link or not a regular file.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if os.path.islink(path) or err.errno == errno.ENXIO:  # ENXIO: a pipe nobody reads
            raise EntryError(f"{path} is a link or a named pipe: nothing is written to it") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise EntryError(f"{path} is not a regular file: nothing is written to it")
    return fd


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None; a dict gains ``nonfinite``, the dotted path and value
    (``"nan"``, ``"inf"``, ``"-inf"``) of each replaced number, so a reader sees which and why. Strict JSON has no
    NaN or Infinity: browsers, ``jq`` and most languages refuse the bare tokens Python writes by default."""
    found: dict[str, str] = {}

    def clean(value: Any, path: str) -> Any:
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            found[path] = str(float(value))
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    out = clean(obj, "")
    if found and isinstance(out, dict):
        out["nonfinite"] = found
    return out


def json_text(obj: Any, indent: int | None = None) -> str:
    """Strict JSON text of ``obj`` (:func:`strict_json`; numpy scalars and paths as plain values)."""
    return json.dumps(strict_json(obj), indent=indent, default=_json_default, allow_nan=False)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json_text(obj, indent=2).encode())


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return o.item()
    if isinstance(o, np.floating):  # non-finite ones were replaced by strict_json
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
