"""Reading a run folder's entries as untrusted input: the one reader every page, report and command uses.

A run folder may come from a cluster's shared output or from another person, so every byte in it is hostile until
checked. Each entry is opened here and nowhere else:

* **Regular files only.** An entry is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` before a
  byte is read: a symbolic link could lead to any file of this machine, and a named pipe or a device would block
  the reader (and, in a server, every session) for ever.
* **Sizes capped per kind** (:data:`LIMITS`): an entry over its cap is refused, the cap named in the message; a
  ``metrics.jsonl`` is read in chunks of at most :data:`METRICS_CHUNK` bytes, its cursor moved only past the
  complete lines read.
* **JSON numbers checked**: an integer beyond the range of a float reads as an infinity (so every finiteness test
  treats it as NaN and Infinity are treated: not a number to plot or compare), and nesting too deep to parse is a
  malformed file, not a crash.
* **YAML without aliases**: an anchor repeated through aliases could expand into billions of values in whatever
  walks it.
* **Snapshots (``.npz``) checked before loading**: only plain members (not encrypted, stored or deflated), each
  member's ``.npy`` header read first and its shape × item size checked against the member's declared size, the
  declared sizes summed against :data:`NPZ_MEMBERS_MAX` and a deflated member's compression ratio against
  :data:`NPZ_RATIO_MAX`; no object arrays (nothing is unpickled).
* **Pictures** (PNG) read only when their file and pixel counts are within :data:`LIMITS` and
  :data:`IMAGE_PIXELS_MAX` (the header is read before anything is decoded).
* **Checkpoints** (``.pt``) are never loaded here: a listing reads a plain entry of one (its ``step``) from the
  pickle inside the file, built of plain containers alone, with every tensor and torch object left unbuilt and any
  other object refused (:func:`checkpoint_field`). Loading a checkpoint is training's work, with torch.

Every refusal is an :class:`EntryError` (an ``OSError``: callers that treat an unreadable file as missing keep
doing so) whose message names the entry and why; a missing file stays a ``FileNotFoundError``.
"""

from __future__ import annotations

import collections
import io
import json
import math
import os
import pickle
import stat
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from lab.runfolder import layout

KiB, MiB = 1 << 10, 1 << 20
LIMITS = {
    layout.STATUS: 1 * MiB,
    layout.CONFIG: 8 * MiB,
    layout.CONFIG_YAML: 1 * MiB,
    layout.SWEEP: 16 * MiB,
    layout.LOCK: 64 * KiB,
    "snapshot": 64 * MiB,  # one snapshot's .npz file
    "figure": 16 * MiB,  # a picture or a JSON figure under figures/
    "analysis": 64 * MiB,  # a report's JSON under analysis/
    "log": 64 * KiB,  # what is read of a log's end (process.log, failed-rank<r>.txt)
    "checkpoint pickle": 16 * MiB,  # a checkpoint's data.pkl: its structure, the tensors' bytes lie beside it
}
"""The most bytes read of each kind of entry."""
METRICS_CHUNK = 4 * MiB
"""The most bytes of ``metrics.jsonl`` one read takes; the next read goes on from there."""
SHAPES = {layout.CONFIG: (16, 4096), layout.CONFIG_YAML: (16, 4096), layout.STATUS: (8, 4096)}
"""Per kind of entry, the deepest nesting and the most keys and values (all levels together) a reader accepts:
a config nested 900 deep broke every view that walks it (RecursionError), and one of 20,000 keys froze a
comparison of two runs for seconds. The lab's own configs nest 3 deep and hold about 100 values."""
NPZ_MEMBERS_MAX = 256 * MiB
"""The most bytes a snapshot's arrays may declare together."""
NPZ_RATIO_MAX = 64
"""The most a deflated member (over 1 MiB) may expand: the lab writes its snapshots uncompressed."""
NPZ_KINDS = "biufcUS"
"""The dtype kinds a snapshot may hold: numbers, booleans and strings (never objects)."""
IMAGE_PIXELS_MAX = 4096 * 4096
"""The most pixels a picture may declare."""
_MAX_INT_DIGITS = 308  # beyond this an integer does not fit a float


class EntryError(OSError):
    """An entry of a run folder that is not read: not a regular file, over its size cap, or malformed. The message
    names the entry and the reason."""


def _name(path: Path) -> str:
    """How a message names an entry: its folder's name and its own (``run-1/status.json``)."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def size_text(n: float) -> str:
    """``12.0 MB``, ``640 kB``, ``20 B``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def open_entry(path: str | Path) -> tuple[int, os.stat_result]:
    """A file descriptor for reading the regular file ``path`` and its ``fstat``, without following a link and
    without blocking on a pipe or a device.

    Raises:
        FileNotFoundError: it is missing.
        EntryError: it is a symbolic link, a named pipe, a socket, a device or a folder.
        OSError: it cannot be opened.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        if os.path.islink(path):
            raise EntryError(f"{_name(path)} is a symbolic link: not followed") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise EntryError(f"{_name(path)} is {kind_of(st.st_mode)}, not a regular file: not read")
    return fd, st


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words: ``a regular file``, ``a named pipe``, ``a folder``, …"""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a device"


def read_bytes(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused when it holds more than ``limit`` (:func:`open_entry`)."""
    fd, st = open_entry(path)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise EntryError(f"{_name(path)} holds {size_text(st.st_size)}, more than the {size_text(limit)} this "
                             "kind of entry may hold: not read")
        data = f.read(st.st_size + 1)  # (a read of the whole cap would set aside that much memory first)
    if len(data) > limit:  # it grew since fstat
        raise EntryError(f"{_name(path)} holds more than the {size_text(limit)} this kind of entry may hold: not read")
    return data


def read_tail(path: str | Path, size: int = LIMITS["log"]) -> bytes:
    """The last ``size`` bytes of the regular file ``path`` (a log; :func:`open_entry`)."""
    fd, st = open_entry(path)
    with os.fdopen(fd, "rb") as f:
        f.seek(max(0, st.st_size - size))
        return f.read(size)


# -- JSON and YAML -----------------------------------------------------------------------------------------------
def _parse_int(text: str) -> int | float:
    """An integer, or an infinity when it does not fit a float (a 400-digit step is not a step)."""
    digits = len(text) - text.startswith("-")
    if digits > _MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def loads_json(data: bytes | str) -> Any:
    """Parse JSON text from a run folder: integers beyond float range become infinities (:func:`_parse_int`).

    Raises:
        ValueError: not JSON, not UTF-8, or nested too deeply to parse.
    """
    try:
        return json.loads(data, parse_int=_parse_int)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def check_shape(value: Any, depth: int, items: int, what: str) -> None:
    """Refuse ``value`` (parsed JSON or YAML) nested deeper than ``depth`` levels or holding more than ``items``
    keys and values over all its levels; walked without recursion.

    Raises:
        ValueError: too deep or too wide (the message names ``what`` and the bound).
    """
    stack, count = [(value, 1)], 0
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if level > depth:
            raise ValueError(f"{what} nests deeper than {depth} levels")
        count += len(children)
        if count > items:
            raise ValueError(f"{what} holds more than {items} keys and values")
        stack.extend((child, level + 1) for child in children)


def read_json(path: str | Path, limit: int) -> Any:
    """The parsed JSON of the regular file ``path`` of at most ``limit`` bytes (and, for the kinds of
    :data:`SHAPES`, no deeper or wider than theirs).

    Raises:
        FileNotFoundError, EntryError, OSError: as :func:`read_bytes`.
        ValueError: it is not JSON, or nests too deep or holds too much (the message names the file).
    """
    data = read_bytes(path, limit)
    try:
        value = loads_json(data)
    except ValueError as err:
        raise ValueError(f"{_name(path)} is not JSON ({str(err)[:80]})") from None
    if Path(path).name in SHAPES:
        check_shape(value, *SHAPES[Path(path).name], _name(path))
    return value


def loads_yaml(text: str) -> Any:
    """Parse YAML from a run folder safely (``safe_load``), refusing anchors and aliases.

    Raises:
        yaml.YAMLError: not YAML, or it uses an alias.
    """
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError("it repeats a value through an alias (*name), which a config never needs")
    return yaml.safe_load(text)


# -- metrics.jsonl -----------------------------------------------------------------------------------------------
class Lines(NamedTuple):
    """What one read of a JSON-lines file gave (:func:`read_jsonl`)."""

    records: list[dict[str, Any]]  # the complete lines that hold a JSON object
    cursor: int  # the byte offset after the last complete line read
    bad: int  # complete lines that are not a JSON object (skipped)
    torn: bool  # the file ends in a line without its newline (a writer may be mid-line)
    more: bool  # complete lines remain past ``cursor`` (the read stopped at its byte budget)


def read_jsonl(path: str | Path, cursor: int = 0, budget: int = METRICS_CHUNK) -> Lines:
    """The JSON-object lines of the regular file ``path`` from byte offset ``cursor`` on, at most ``budget`` bytes
    of them, read while a writer may be appending.

    A last line without its newline is not returned (the writer may be mid-line): the cursor stays before it, so a
    later call picks it up complete. A complete line that is not a JSON object is skipped and counted, and so is a
    line longer than ``budget`` (stepped over a budget at a time, each piece counted as one such line).

    Raises:
        FileNotFoundError, EntryError, OSError: as :func:`open_entry`.
    """
    fd, st = open_entry(path)
    with os.fdopen(fd, "rb") as f:
        f.seek(cursor)
        data = f.read(budget)
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) == budget:  # a line longer than the budget is no record: step over this piece
        return Lines([], cursor + budget, 1, False, cursor + budget < st.st_size)
    records, bad = [], 0
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except ValueError:  # JSONDecodeError, UnicodeDecodeError, too deep
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            bad += 1
    new_cursor = cursor + end
    more = len(data) == budget and new_cursor < st.st_size
    return Lines(records, new_cursor, bad, not more and end < len(data), more)


# -- snapshots (.npz) --------------------------------------------------------------------------------------------
def _member_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> np.ndarray:
    """One member of a snapshot, its header checked against its declared size before its data is read."""
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_2_0 if version >= (2, 0) else \
                np.lib.format.read_array_header_1_0
            shape, fortran, dtype = header(f)
        except (ValueError, SyntaxError, TypeError) as err:
            raise EntryError(f"{where} is not an array ({str(err)[:80]})") from None
        if dtype.hasobject or dtype.kind not in NPZ_KINDS or dtype.fields is not None:
            raise EntryError(f"{where} holds {dtype} values; a snapshot holds numbers and strings only")
        count = math.prod(shape)
        size = count * dtype.itemsize
        offset = f.tell()
        if offset + size != info.file_size:
            raise EntryError(f"{where} declares shape {tuple(shape)} of {dtype} ({size_text(size)}) but holds "
                             f"{size_text(max(0, info.file_size - offset))}")
        data = f.read(size)
    if len(data) != size:
        raise EntryError(f"{where} is truncated")
    array = np.frombuffer(data, dtype=dtype, count=count)
    return (array.reshape(shape[::-1]).T if fortran else array.reshape(shape)).copy()


def read_npz(path: str | Path, limit: int = LIMITS["snapshot"]) -> dict[str, np.ndarray]:
    """The arrays of the snapshot ``path`` (a ``.npz`` written by :func:`numpy.savez`), each checked before it is
    loaded (see the module docstring).

    Raises:
        FileNotFoundError, EntryError, OSError: missing, not a regular file, too large, or a member refused (the
            message names it and why).
    """
    name = _name(path)
    data = read_bytes(path, limit)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as err:
        raise EntryError(f"{name} is not a snapshot file (.npz): {str(err)[:80]}") from None
    if len(infos) > 256:
        raise EntryError(f"{name} holds {len(infos)} arrays; a snapshot holds at most 256")
    total = 0
    for info in infos:
        where = f"{name}: {info.filename!r}"
        if not info.filename.endswith(".npy") or "/" in info.filename:
            raise EntryError(f"{where} is not an array (.npy)")
        if info.flag_bits & 0x1:
            raise EntryError(f"{where} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise EntryError(f"{where} is compressed with method {info.compress_type}; "
                             "snapshots are stored or deflated")
        if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > MiB \
                and info.file_size > NPZ_RATIO_MAX * max(1, info.compress_size):
            raise EntryError(f"{where} expands {info.file_size / max(1, info.compress_size):.0f}-fold "
                             f"({size_text(info.compress_size)} to {size_text(info.file_size)}); at most "
                             f"{NPZ_RATIO_MAX}-fold is read")
        total += info.file_size
        if total > NPZ_MEMBERS_MAX:
            raise EntryError(f"{name} declares more than {size_text(NPZ_MEMBERS_MAX)} of arrays: not read")
    try:
        return {info.filename[:-4]: _member_array(zf, info, f"{name}: {info.filename!r}") for info in infos}
    except (zipfile.BadZipFile, EOFError, RuntimeError, ValueError) as err:  # a bad CRC, a broken stream
        raise EntryError(f"{name} is damaged: {str(err)[:80]}") from None


# -- checkpoints (.pt) -------------------------------------------------------------------------------------------
class _Unbuilt:
    """What a checkpoint's tensors, storages and other torch objects are read as: nothing (no code of theirs runs,
    no byte of their data is read)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Unbuilt:
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain values and containers; a torch object becomes :class:`_Unbuilt`, and any other class refuses
    the file, as ``torch.load(weights_only=True)`` does."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":  # a state dict (with its ``_metadata``)
            return collections.OrderedDict
        if module == "torch" or module.startswith("torch.") or (module, name) == ("_codecs", "encode"):
            return _Unbuilt
        raise pickle.UnpicklingError(f"{module}.{name} is not a tensor or a plain container")

    def persistent_load(self, pid: Any) -> _Unbuilt:  # a tensor's storage, in a file of its own: never read
        return _Unbuilt()


def checkpoint_field(path: str | Path, key: str) -> int | float | str | bool | None:
    """One plain entry of the checkpoint ``path`` (its ``step``, the ``best_acc`` it was saved with) without torch.

    A checkpoint (``torch.save``) is a zip archive whose ``<name>/data.pkl`` holds its structure; only that is read
    (within ``LIMITS["checkpoint pickle"]``), by an unpickler that builds plain values and containers alone.

    Returns:
        The number, string or boolean under ``key``; None when the file is missing, a link (or in a linked folder),
        not a checkpoint, holds objects other than tensors and plain containers, or holds no plain value under
        ``key`` (a tensor is none).
    """
    path = Path(path)
    if path.parent.is_symlink():
        return None
    try:
        fd, _ = open_entry(path)
        with os.fdopen(fd, "rb") as f, zipfile.ZipFile(f) as zf:
            info = next(i for i in zf.infolist() if i.filename.count("/") == 1 and i.filename.endswith("/data.pkl"))
            if info.file_size > LIMITS["checkpoint pickle"]:
                return None
            with zf.open(info) as member:
                state = _PlainUnpickler(io.BytesIO(member.read(LIMITS["checkpoint pickle"]))).load()
    except Exception:  # a foreign file can fail in any way: missing, a link, not a zip, no data.pkl, a bad pickle
        return None
    value = state.get(key) if isinstance(state, dict) else None
    return value if isinstance(value, (int, float, str)) else None


# -- pictures ----------------------------------------------------------------------------------------------------
def read_picture(path: str | Path, limit: int = LIMITS["figure"]) -> bytes:
    """The bytes of the PNG ``path``, read only when its file (``limit``) and its declared pixels
    (:data:`IMAGE_PIXELS_MAX`) are within bounds and it is a PNG.

    Raises:
        FileNotFoundError, EntryError, OSError: missing, not a regular file, too large or not a PNG.
    """
    from PIL import Image, UnidentifiedImageError

    data = read_bytes(path, limit)
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            fmt, (w, h) = image.format, image.size
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
        raise EntryError(f"{_name(path)} is not a picture ({str(err)[:80]})") from None
    if fmt != "PNG":
        raise EntryError(f"{_name(path)} is a {fmt} file, not a PNG")
    if w * h > IMAGE_PIXELS_MAX:
        raise EntryError(f"{_name(path)} declares {w} × {h} pixels; at most {IMAGE_PIXELS_MAX:,} are shown")
    return data
