"""Weights from a file someone else wrote (a release, a colleague's cluster run), loaded safely and loudly.

Only tensors are read: a ``.safetensors`` file, or a PyTorch file through ``torch.load(weights_only=True)``; a file
that holds pickled objects (a whole model, a custom class) is refused, as loading it would run its code. The common
layouts are unwrapped — a release's ``{"model": …}`` (the MAE's), ``{"state_dict": …}``, the lab's own checkpoints —
and the common prefixes stripped when every key carries one: ``module.`` (DDP), ``_orig_mod.`` (``torch.compile``).
The keys are then matched against the model's: missing, unexpected and mismatched-shape keys are listed, and any of
them refuses the load unless ``strict=False``. Nothing is fetched from a hub: the lab runs offline.

The file is read once, from a path or from a file already open (a page opens it inside its data folders and hands
over the open file, so nothing is looked up by name again); its SHA-256 is computed from the very bytes loaded. An
imported network keeps no copy of its weights: its run records the file's path, size and SHA-256, and
:func:`read_recorded` reads the file again when an analysis needs the weights, refusing it if it is gone or its bytes
are no longer those recorded (the size is compared before anything is read, the digest before anything is used).
Nothing is allocated from what a file declares before the declaration is checked against the file's own size and
the ceilings below: a small file cannot make the lab allocate gigabytes. So a safetensors header must fit in the
file and each tensor's declared shape in its stored bytes; a PyTorch file must be the zip archive ``torch.save``
writes, every entry stored uncompressed (as ``torch.save`` stores them), their sizes within the file's.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch
from torch import nn

WRAPPERS = ("model", "state_dict", "model_state", "module")
"""Keys under which a checkpoint holds its weights (tried in this order when the file is not itself a state dict)."""
PREFIXES = ("module.", "_orig_mod.")
"""Prefixes stripped when every key carries one (DDP's wrapper, ``torch.compile``'s)."""
LISTED = 10
"""The most keys of each kind a refusal names (it gives the count of the rest)."""
MAX_TENSORS = 65_536
"""The most tensors a weights file may declare: dozens of times a large network's (a ViT-H has under 1,000), and a
bound on what a file of many empty tensors costs to read."""
MAX_HEADER_BYTES = 100_000_000
"""The longest safetensors header (its JSON table of tensors) read: safetensors' own ceiling."""
MAX_PICKLE_BYTES = 64 * 2**20
"""The largest pickle (``*/data.pkl``, the structure around the tensors) of a PyTorch file read: a state dict of
:data:`MAX_TENSORS` tensors pickles to a few megabytes."""
MAX_DIMS = 64
"""The most dimensions a safetensors tensor may declare."""
ZIP_ENTRIES_BESIDE_TENSORS = 16
"""The entries a ``torch.save`` archive holds besides its tensors' (the pickle, its version, byte order …), with room
to spare."""
SAFETENSORS_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E4M3FNUZ": 1, "F8_E5M2": 1, "F8_E5M2FNUZ": 1,
                        "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
                        "F64": 8, "C64": 8}
"""Bytes per element of each safetensors dtype the lab loads into torch."""

_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_CENTRAL = b"PK\x01\x02"  # each entry of a zip's table of contents starts with it

class WeightsError(ValueError):
    """A weights file that cannot be loaded into the model; the message says why and which keys."""


@dataclass
class LoadReport:
    """How a file's weights matched a model: what it lacked, what it had besides, what had another shape; and which
    bytes they were (the file's name, size and SHA-256, computed from the bytes loaded)."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)  # "key: file's shape ≠ model's shape"
    loaded: int = 0
    name: str = ""
    sha256: str = ""
    size: int = 0

    @property
    def exact(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    @property
    def initialised(self) -> list[str]:
        """The model's tensors the file did not give (missing from it, or of another shape there): a load with
        ``strict=False`` leaves them at their initialisation."""
        return self.missing + [entry.partition(": ")[0] for entry in self.mismatched]

    def text(self) -> str:
        """Each kind of difference, with at most :data:`LISTED` keys named."""
        parts = []
        for what, keys in (("missing from the file", self.missing), ("unexpected in the file", self.unexpected),
                           ("of another shape", self.mismatched)):
            if keys:
                more = f" and {len(keys) - LISTED} more" if len(keys) > LISTED else ""
                parts.append(f"{len(keys)} {what}: {', '.join(keys[:LISTED])}{more}")
        return "; ".join(parts) or "every key matched"


@dataclass
class WeightsFile:
    """A weights file's tensors (unwrapped, prefix stripped) and the bytes they came from: the file's name (its path
    when it has one), size in bytes and SHA-256."""

    state: dict[str, torch.Tensor] = field(repr=False)
    name: str
    sha256: str
    size: int


def read_state_dict(source: str | Path | BinaryIO) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, unwrapped and with a common prefix stripped (see the module).

    Args:
        source: a path (opened once), or a binary file already open (read from where it stands, never reopened by
            name; its ``name``, when it has one, says which kind of file it is and names it in messages).

    Raises:
        FileNotFoundError: no such file, or not a regular file.
        WeightsError: it holds pickled objects, or no state dict of tensors; it declares more than the file holds
            or more than the ceilings of the module (each refusal says what and the limit); it cannot be read.
    """
    return read_weights(source).state


def read_weights(source: str | Path | BinaryIO) -> WeightsFile:
    """The tensors of a weights file and which bytes they are, read once (see the module and
    :func:`read_state_dict`, which says what is refused)."""
    data, name = _bytes(source)
    return _parsed(data, name)


def read_recorded(path: str | Path, sha256: str, size: int | None = None) -> WeightsFile:
    """The weights file an imported run recorded, read again: the same checks as :func:`read_weights`, and the bytes
    must be those recorded.

    Args:
        path: the file's path as recorded.
        sha256: the SHA-256 recorded of its bytes.
        size: its size in bytes as recorded: a file of another size is refused before it is read (None: not checked).

    Raises:
        FileNotFoundError: the file is gone (or is no regular file).
        WeightsError: its size or SHA-256 is no longer the one recorded (the message says to import it again), or
            it cannot be read.
    """
    changed = (f"{path} has changed since the network was imported, so its weights are no longer those analysed: "
               "import it again (lab analyze … --model … --weights FILE)")
    data, name = _bytes(path, expect_size=size, changed=changed)
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise WeightsError(f"{changed} (its SHA-256 is {digest[:12]}…, {sha256[:12]}… when imported)")
    return _parsed(data, name)


def _parsed(data: bytes, name: str) -> WeightsFile:
    state = _safetensors_state(data, name) if _is_safetensors(name, data) else _torch_state(data, name)
    state = _prefix_stripped(_unwrapped(state, name))
    if len(state) > MAX_TENSORS:
        raise WeightsError(f"{name} holds {len(state):,} tensors; the lab loads at most {MAX_TENSORS:,} from a file")
    return WeightsFile(state, name, hashlib.sha256(data).hexdigest(), len(data))


def _bytes(source: str | Path | BinaryIO, *, expect_size: int | None = None, changed: str = ""
           ) -> tuple[bytes, str]:
    """The whole content of ``source``, read once, and the name to say it by (a path of another size than
    ``expect_size`` is refused, with the message ``changed``, before it is read)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:  # non-blocking: a FIFO named by mistake is refused below rather than waited on
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise FileNotFoundError(f"no weights file {path}" + (f" any more: {changed}" if changed else "")) from None
        except OSError as err:
            raise WeightsError(f"{path} cannot be opened ({err.strerror or err})") from None
        with open(fd, "rb", closefd=True) as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise FileNotFoundError(f"{path} is not a weights file but a folder or other special file")
            if expect_size is not None and info.st_size != expect_size:
                raise WeightsError(f"{changed} (it is {info.st_size:,} bytes long, {expect_size:,} when imported)")
            os.set_blocking(f.fileno(), True)
            data = _read_all(f, str(path), None if expect_size is None else expect_size + 1)
            if expect_size is not None and len(data) != expect_size:  # it grew or shrank as it was read
                raise WeightsError(f"{changed} (it changed size as it was read)")
            return data, str(path)
    name = getattr(source, "name", None)
    name = name if isinstance(name, str) and name else "the weights file"
    return _read_all(source, name), name


def _read_all(f: BinaryIO, name: str, limit: int | None = None) -> bytes:
    try:
        data = f.read() if limit is None else f.read(limit)
    except OSError as err:
        raise WeightsError(f"{name} cannot be read ({err.strerror or err})") from None
    if not isinstance(data, bytes | bytearray | memoryview):
        raise WeightsError(f"{name} was opened as text: open the weights file in binary mode ('rb')")
    return bytes(data)


def _is_safetensors(name: str, data: bytes) -> bool:
    suffix = Path(name).suffix
    if suffix:
        return suffix == ".safetensors"
    return data[8:9] == b"{"  # no name to go by: a safetensors header (JSON) starts after its 8-byte length


def _safetensors_state(data: bytes, name: str) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors, once its header is checked against the file's size and the ceilings."""
    unreadable = f"{name} is not a readable safetensors file"
    if len(data) < 8:
        raise WeightsError(f"{unreadable}: it is {len(data)} bytes long, shorter than the 8-byte length its header "
                           "starts with")
    length = int.from_bytes(data[:8], "little")
    if length > len(data) - 8:
        raise WeightsError(f"{unreadable}: it declares a header of {length:,} bytes but holds only "
                           f"{len(data) - 8:,} after the length (cut short, or not safetensors)")
    if length > MAX_HEADER_BYTES:
        raise WeightsError(f"{unreadable}: it declares a header of {length:,} bytes; safetensors and the lab read "
                           f"headers of at most {MAX_HEADER_BYTES:,}")
    header = data[8:8 + length]
    objects = header.count(b"{") - 1  # every tensor's entry is a JSON object: a bound counted before parsing
    if objects > MAX_TENSORS:
        raise WeightsError(f"{name} declares {objects:,} tensors (entries in its header); the lab loads at most "
                           f"{MAX_TENSORS:,} from a file")
    try:
        table = json.loads(header)
    except ValueError as err:
        raise WeightsError(f"{unreadable}: its header is not JSON ({err})") from None
    if not isinstance(table, dict):
        raise WeightsError(f"{unreadable}: its header is not a table of tensors")
    table.pop("__metadata__", None)
    stored = len(data) - 8 - length
    for key, entry in table.items():
        _check_entry(key, entry, stored, unreadable)
    from safetensors.torch import load

    try:
        return load(data)
    except Exception as err:  # safetensors raises its own error types for a damaged file
        raise WeightsError(f"{unreadable} ({err})") from None


def _check_entry(key: str, entry: object, stored: int, unreadable: str) -> None:
    """One header entry: a known dtype, a shape, and offsets inside the data that hold exactly that shape."""
    if not isinstance(entry, dict):
        raise WeightsError(f"{unreadable}: its entry {key!r} is no table of dtype, shape and offsets")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_ITEMSIZE:
        raise WeightsError(f"{unreadable}: tensor {key!r} has the dtype {str(dtype)[:40]!r}; the lab loads "
                           f"{', '.join(SAFETENSORS_ITEMSIZE)}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise WeightsError(f"{unreadable}: tensor {key!r} declares the shape {str(shape)[:80]}, not a list of at "
                           f"most {MAX_DIMS} sizes")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= stored):
        raise WeightsError(f"{unreadable}: tensor {key!r} declares its bytes at {str(offsets)[:80]}, outside the "
                           f"{stored:,} bytes of data the file holds")
    need = math.prod(shape) * SAFETENSORS_ITEMSIZE[dtype]
    if offsets[1] - offsets[0] != need:
        raise WeightsError(f"{unreadable}: tensor {key!r} declares the shape {tuple(shape)} of {dtype} "
                           f"({need:,} bytes) but {offsets[1] - offsets[0]:,} bytes stored for it")


def _torch_state(data: bytes, name: str) -> object:
    """What a PyTorch file holds, once its archive is checked: every entry stored, their sizes within the file's."""
    if not data.startswith(_ZIP_MAGIC):
        raise WeightsError(f"{name} is not the zip archive torch.save has written since PyTorch 1.6 (an older "
                           "PyTorch file, or no PyTorch file): the older format's reader allocates whatever sizes "
                           "the file declares, so the lab does not read it. Re-save it with a current torch "
                           "(torch.save(torch.load(old, weights_only=True), new)) and load that")
    entries = data.count(_ZIP_CENTRAL)  # each entry of the table of contents starts so: a bound before parsing
    if entries > MAX_TENSORS + ZIP_ENTRIES_BESIDE_TENSORS:
        raise WeightsError(f"{name} declares up to {entries:,} entries in its archive; the lab reads at most "
                           f"{MAX_TENSORS:,} tensors (and {ZIP_ENTRIES_BESIDE_TENSORS} other entries) from a file")
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as err:
        raise WeightsError(f"{name} is not a readable PyTorch file ({err})") from None
    declared = tensors = 0
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise WeightsError(f"{name} stores its entry {info.filename[:200]!r} compressed ({info.compress_size:,} "
                               f"bytes declaring {info.file_size:,}); torch.save stores every entry uncompressed, "
                               "and unpacking it would allocate the declared size. Re-save it with torch.save")
        declared += info.file_size
        parts = info.filename.split("/")
        if len(parts) == 2 and parts[1] == "data.pkl" and info.file_size > MAX_PICKLE_BYTES:
            raise WeightsError(f"{name} declares a pickle of {info.file_size:,} bytes; the lab reads at most "
                               f"{MAX_PICKLE_BYTES:,} around the tensors")
        tensors += len(parts) == 3 and parts[1] == "data"
    if declared > len(data):
        raise WeightsError(f"{name}'s entries declare {declared:,} bytes in all, more than the file's {len(data):,}: "
                           "it is damaged or forged")
    if tensors > MAX_TENSORS:
        raise WeightsError(f"{name} declares {tensors:,} tensors; the lab loads at most {MAX_TENSORS:,} from a file")
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise WeightsError(f"{name} holds pickled objects, not only tensors: the lab does not load it, as that "
                           "would run code from the file. Save the model's state_dict() (or safetensors) "
                           "instead") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise WeightsError(f"{name} is not a readable PyTorch file ({err})") from None


def _unwrapped(state: object, name: str) -> dict[str, torch.Tensor]:
    if isinstance(state, dict) and not _is_state_dict(state):
        for key in WRAPPERS:
            if _is_state_dict(state.get(key)):
                return state[key]
    if not _is_state_dict(state):
        keys = list(state)[:LISTED] if isinstance(state, dict) else type(state).__name__
        raise WeightsError(f"{name} holds no state dict of tensors (found {keys}; looked under "
                           f"{', '.join(WRAPPERS)})")
    return state


def _is_state_dict(value: object) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _prefix_stripped(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in state):
            state = {k.removeprefix(prefix): v for k, v in state.items()}
    return state


def match(model: nn.Module, state: dict[str, torch.Tensor]) -> LoadReport:
    """How ``state``'s keys and shapes match ``model``'s."""
    own = model.state_dict()
    report = LoadReport(missing=[k for k in own if k not in state], unexpected=[k for k in state if k not in own])
    report.mismatched = [f"{k}: {tuple(v.shape)} ≠ {tuple(own[k].shape)}" for k, v in state.items()
                         if k in own and v.shape != own[k].shape]
    return report


def load_weights(model: nn.Module, source: str | Path | BinaryIO, *, strict: bool = True) -> LoadReport:
    """Load the weights file ``source`` into ``model``; returns how its keys matched, and which bytes were loaded.

    Args:
        model: the network the weights are for (built with the same architecture).
        source: a ``.safetensors`` file or a PyTorch file of tensors: its path (opened once), or the file already
            open in binary mode (read from that descriptor, never reopened by name).
        strict: refuse any missing, unexpected or mismatched key (False: load what matches, report the rest).

    Returns:
        How the keys matched, with the file's ``name``, ``size`` and ``sha256`` — of the bytes loaded, so a record
        of them names exactly what the model holds.

    Raises:
        FileNotFoundError, WeightsError: see :func:`read_state_dict`; and, when ``strict``, keys that do not match
            (every kind named, with the first keys of each).
    """
    return load_state(model, read_weights(source), strict=strict)


def load_state(model: nn.Module, weights: WeightsFile, *, strict: bool = True) -> LoadReport:
    """Load the tensors of a weights file already read (:func:`read_weights`) into ``model``; as
    :func:`load_weights`, which reads and loads in one call.

    Raises:
        WeightsError: when ``strict``, keys that do not match (every kind named, with the first keys of each).
    """
    report = match(model, weights.state)
    report.name, report.sha256, report.size = weights.name, weights.sha256, weights.size
    if strict and not report.exact:
        raise WeightsError(f"{Path(weights.name).name} does not fit {type(model).__name__}: {report.text()} (load it "
                           "anyway, keeping the model's own values there, with strict=False / --strict false)")
    own = model.state_dict()
    fitting = {k: v for k, v in weights.state.items() if k in own and v.shape == own[k].shape}
    model.load_state_dict(fitting, strict=False)
    report.loaded = len(fitting)
    return report
