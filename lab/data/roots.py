"""The data folders a server may read: a path typed into a page resolves inside them, never anywhere on disk.

The folders are named when the server starts: ``LAB_DATA_DIRS`` (one or more paths, separated by ``os.pathsep``);
they are resolved once, so they may themselves be (or lie under) links. A relative path is looked up in each folder
in turn; an absolute one must lie inside one of them.

A typed path is bounded before any work is done with it (:data:`MAX_PATH_CHARS` characters, :data:`MAX_COMPONENTS`
names), since resolving a path costs time that grows with the square of its length; and every error the system
gives while the path is looked up is said as text (PermissionError, FileNotFoundError or ValueError), never let
through raw.

Folders (:func:`resolve_data_path`) are resolved, links included, and must lie inside a data folder. A file
(:func:`open_data_file`, a weights file typed into a page) is opened once, from the data folder down, one name at
a time, without following any link: what is read is what was checked, and a link swapped in afterwards changes
nothing. A link inside the data folders is refused rather than followed.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Sequence
from pathlib import Path

MAX_PATH_CHARS = 4096
"""The longest path taken, in characters (Linux's ``PATH_MAX``): a longer one is refused before it is looked at."""
MAX_COMPONENTS = 64
"""The most names (folders and file) a path may have: far deeper than any data folder, and it keeps looking a
path up cheap."""

_FOLDER_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # non-blocking: a FIFO does not hang
NO_LINKS = "the lab does not follow links inside the server's folders: name the file itself"


def data_roots() -> list[Path]:
    """The folders named by ``LAB_DATA_DIRS`` (resolved; empty when it is unset)."""
    raw = os.environ.get("LAB_DATA_DIRS", "")
    return _resolved_roots([p for p in raw.split(os.pathsep) if p.strip()])


def _resolved_roots(roots: Sequence[str | Path]) -> list[Path]:
    try:
        return [Path(r).expanduser().resolve() for r in roots]
    except (OSError, RuntimeError) as err:
        raise PermissionError(f"a data folder of this server cannot be resolved ({err}): check LAB_DATA_DIRS") from None


def _bounded(text: str) -> str:
    """``text`` stripped, once it is known to be short enough to look up.

    Raises:
        ValueError: too long, too many names, or a NUL character (which no file name holds).
    """
    if len(text) > MAX_PATH_CHARS + 1024:  # before strip(): a megabyte of spaces is refused as cheaply
        raise ValueError(f"the path is {len(text):,} characters long; the lab takes paths of at most "
                         f"{MAX_PATH_CHARS:,}: type the path of a file or folder inside the data folders")
    text = text.strip()
    if len(text) > MAX_PATH_CHARS:
        raise ValueError(f"the path is {len(text):,} characters long; the lab takes paths of at most "
                         f"{MAX_PATH_CHARS:,}: type the path of a file or folder inside the data folders")
    if "\x00" in text:
        raise ValueError("the path holds a NUL character, which no file name can: type the path as it is on disk")
    names = sum(1 for part in text.split("/") if part)
    if names > MAX_COMPONENTS:
        raise ValueError(f"the path has {names} names; the lab takes paths of at most {MAX_COMPONENTS}: type the "
                         "path of a file or folder inside the data folders")
    return text


def _expanded(text: str) -> Path:
    try:
        return Path(text).expanduser()
    except (RuntimeError, KeyError):  # no home folder to expand ``~`` to
        raise FileNotFoundError(f"{text!r} starts with ~ but this server has no home folder to expand it to: "
                                "type the full path") from None


def resolve_data_path(text: str, roots: Sequence[str | Path] | None = None) -> Path:
    """The folder ``text`` names, inside one of ``roots`` (default :func:`data_roots`); links are resolved first,
    so a link cannot lead outside.

    Raises:
        PermissionError: no data folders are configured, or the path lies outside all of them.
        FileNotFoundError: it lies inside but does not exist.
        ValueError: a path too long or too deep to look up (:data:`MAX_PATH_CHARS`, :data:`MAX_COMPONENTS`), one
            that holds a NUL character, or one the system cannot look up (the message says why).
    """
    text = _bounded(text)
    roots = data_roots() if roots is None else _resolved_roots(roots)
    if not roots:
        raise PermissionError("this server reads no data folders: start it with LAB_DATA_DIRS=/path/to/data "
                              "to use data sets other than digits")
    path = _expanded(text)
    try:
        candidates = [path.resolve()] if path.is_absolute() else [(root / path).resolve() for root in roots]
        inside = [c for c in candidates if any(c == r or r in c.parents for r in roots)]
        if not inside:
            raise PermissionError(f"{text!r} is outside the data folders of this server "
                                  f"({', '.join(map(str, roots))})")
        for c in inside:
            if c.is_dir():
                return c
    except (PermissionError, FileNotFoundError):
        raise
    except (OSError, RuntimeError, ValueError) as err:  # a name too long, a loop of links, an undecodable name
        raise ValueError(f"{text[:200]!r} cannot be looked up ({_reason(err)}): type the path of a folder inside "
                         "the data folders") from None
    raise FileNotFoundError(f"no folder {text!r} in the data folders ({', '.join(map(str, roots))})")


def _reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


class _Refused(Exception):
    """Why one root does not hold the file; ``rank`` orders the reasons (the most telling one is said)."""

    def __init__(self, rank: int, error: Exception) -> None:
        super().__init__(str(error))
        self.rank, self.error = rank, error


def _inside(path: Path, roots: list[Path], given: Sequence[str | Path]) -> list[tuple[Path, tuple[str, ...]]]:
    """Each root an absolute ``path`` lies under, with the names below it: compared name by name with the root
    resolved and as it was given (a root that is a link may be typed either way), nothing below it resolved."""
    found = []
    for root, raw in zip(roots, given, strict=True):
        for form in dict.fromkeys((root, Path(os.path.abspath(Path(raw).expanduser())))):
            if path.parts[:len(form.parts)] == form.parts:
                found.append((root, path.parts[len(form.parts):]))
                break
    return found


def resolve_data_file(text: str, roots: Sequence[str | Path] | None = None) -> Path:
    """The regular file ``text`` names inside one of ``roots`` (default :func:`data_roots`), checked as
    :func:`open_data_file` opens it (no link below a root, no ``..``), for a reader that takes a path (a text file
    read by a tokenizer).

    Raises:
        PermissionError, FileNotFoundError, ValueError: as :func:`open_data_file`.
    """
    roots = data_roots() if roots is None else roots
    if not roots:
        raise PermissionError("this server reads no data folders: start it with LAB_DATA_DIRS=/path/to/data "
                              "to read a file of your own")
    with open_data_file(text, roots) as f:
        return Path(f.name)


def open_data_file(text: str, roots: Sequence[str | Path]) -> io.BufferedReader:
    """The file ``text`` names (a weights file typed into a page), inside one of ``roots``, opened once for reading.

    A relative path is looked up in each root in turn; an absolute one must start with one of them. The file is
    opened from the root down, one name at a time, never following a link: a link anywhere below the root is
    refused, so what is opened cannot lie outside, and a link swapped in after the check changes nothing, since
    nothing is opened by name again (read the returned object, never its ``name``). The roots themselves may be
    links: they are resolved once.

    Args:
        text: the path as typed.
        roots: the folders this server reads.

    Returns:
        A binary file object, at its start, whose ``name`` is the file's path (a str) inside its root, to show.
        The caller closes it.

    Raises:
        PermissionError: no roots, a path outside all of them, ``..``, a link below a root, a file that may not be
            read.
        FileNotFoundError: no such file, or it is a folder or not a regular file (a FIFO, a device).
        ValueError: a path too long or too deep (:data:`MAX_PATH_CHARS`, :data:`MAX_COMPONENTS`), one with a NUL
            character, or a name the system cannot take (the message says why).
    """
    text = _bounded(text)
    resolved = _resolved_roots(roots)
    where = ", ".join(map(str, resolved)) or "none"
    if not text:
        raise FileNotFoundError(f"no file named: type the path of a file inside the folders this server reads "
                                f"({where})")
    if not resolved:
        raise PermissionError(f"{text!r} is outside the folders this server reads (none); start it with "
                              "LAB_DATA_DIRS=/path/to/folder to add one")
    path = _expanded(text)
    tries = _inside(path, resolved, roots) if path.is_absolute() else [(root, path.parts) for root in resolved]
    if not tries:
        raise PermissionError(f"{text!r} is outside the folders this server reads ({where}); start it with "
                              "LAB_DATA_DIRS=/path/to/folder to add one")
    if any(".." in names for _, names in tries):
        raise PermissionError(f"{text!r} climbs out of a folder with '..', which the lab does not follow: name the "
                              f"file by its path inside the folders this server reads ({where})")
    refusals: list[_Refused] = []
    for root, names in tries:
        try:
            return _open_below(root, names, text)
        except _Refused as refused:
            refusals.append(refused)
    raise max(refusals, key=lambda r: r.rank).error from None


def _open_below(root: Path, names: tuple[str, ...], text: str) -> io.BufferedReader:
    """``root``/``names`` opened one name at a time without following links; :class:`_Refused` says why not."""
    if not names:
        raise _Refused(1, FileNotFoundError(f"{text!r} is the folder {root}, not a file: name a file inside it"))
    shown = str(root.joinpath(*names))
    try:
        parent = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise _Refused(2, PermissionError(f"the folder {root} cannot be opened ({_reason(err)})")) from None
    fd = -1
    try:
        for depth, name in enumerate(names):
            last = depth == len(names) - 1
            try:
                opened = os.open(name, _FILE_FLAGS if last else _FOLDER_FLAGS, dir_fd=parent)
            except OSError as err:
                raise _Refused(*_why(err, parent, name, shown, last)) from None
            except ValueError as err:  # a name the file system's encoding cannot hold
                raise _Refused(3, ValueError(f"{text[:200]!r} holds a name that cannot be looked up ({err})")) from None
            if last:
                fd = opened
            else:
                os.close(parent)
                parent = opened
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise _Refused(1, FileNotFoundError(f"{shown} is {kind}: name a file"))
        os.set_blocking(fd, True)
        raw = io.FileIO(fd, "rb", closefd=True)
        fd = -1  # owned by ``raw`` from here
        raw.name = shown
        return io.BufferedReader(raw)
    except OSError as err:  # fstat or fcntl on an open descriptor: rare, said as text all the same
        raise _Refused(2, ValueError(f"{shown} cannot be read ({_reason(err)})")) from None
    finally:
        os.close(parent)
        if fd >= 0:
            os.close(fd)


def _why(err: OSError, parent: int, name: str, shown: str, last: bool) -> tuple[int, Exception]:
    """The rank and error that say why ``name`` (under the folder ``parent``) could not be opened."""
    if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            link = stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
        except OSError:
            link = err.errno == errno.ELOOP
        if link:
            where = "is a link" if last else f"passes through the link {name!r}"
            return 4, PermissionError(f"{shown} {where}: {NO_LINKS}")
        return 1, FileNotFoundError(f"no file {shown}: {name!r} is a file, not a folder")
    if err.errno == errno.ENOENT:
        return 0, FileNotFoundError(f"no file {shown} (no {'file' if last else 'folder'} {name!r} there)")
    if err.errno in (errno.EACCES, errno.EPERM):
        return 3, PermissionError(f"{shown} may not be read by this server ({_reason(err)})")
    if err.errno == errno.ENAMETOOLONG:
        return 3, ValueError(f"a name in {shown[:200]!r} is longer than the file system allows: type the path as "
                             "it is on disk")
    return 2, ValueError(f"{shown[:200]} cannot be opened ({_reason(err)})")
