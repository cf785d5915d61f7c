"""On-disk image formats: IDX (MNIST), CIFAR python pickles, ImageFolder trees.

Bytes in, numpy arrays out (and back, for the writers tests use to build tiny real-format files). Nothing here knows
about splits, class subsets or tensors; `lab.data.readers` builds datasets on top. Readers never download and fail
loudly: a malformed file is a `FormatError` (a `ValueError`) whose message names the file.
"""

from __future__ import annotations

import gzip
import importlib
import pickle
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

__all__ = [
    "IMAGE_SUFFIXES",
    "FormatError",
    "list_image_folder",
    "make_synthetic_image_folder",
    "read_cifar_batch",
    "read_cifar_meta",
    "read_idx",
    "read_images",
    "write_cifar_batch",
    "write_cifar_meta",
    "write_idx",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")

# IDX type byte -> element dtype; multi-byte types are big-endian on disk (LeCun's spec).
_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


class FormatError(ValueError):
    """A dataset file exists but is not what its format promises (bad magic number, truncated, wrong shape)."""


# ---------------------------------------------------------------- IDX


def _read_bytes(path: Path) -> bytes:
    """Whole file as bytes, gunzipped when it starts with the gzip magic (so a mis-named file still reads)."""
    data = path.read_bytes()
    if data[:2] != _GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:
        raise FormatError(f"{path}: corrupt or truncated gzip stream ({err})") from err


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (raw or gzipped) as the MNIST family stores images and labels.

    Layout: two zero bytes, a type byte, a rank byte, then `rank` big-endian uint32 sizes and the elements.

    Args:
        path: the file; gzip is detected from its first bytes, not its suffix.

    Returns:
        Array of the stored shape, e.g. uint8 `[n, 28, 28]` for images or `[n]` for labels. uint8 data is a read-only
        view of the file's bytes (no copy); index or copy it before writing to it.

    Raises:
        FileNotFoundError: the file does not exist.
        FormatError: bad magic number, unknown type, or a size that does not match the header.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES or data[3] == 0:
        raise FormatError(
            f"{path} is not an IDX file: magic number 0x{data[:4].hex() or 'empty'} "
            f"(expected 0x0000TTRR with type TT in {{{', '.join(f'{k:02x}' for k in _IDX_DTYPES)}}} and rank RR >= 1)"
        )
    dtype, ndim = _IDX_DTYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise FormatError(f"{path} is truncated: {len(data)} bytes, shorter than its {header}-byte header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    count = int(np.prod(shape, dtype=np.int64))
    expected = header + count * dtype.itemsize
    if len(data) != expected:
        state = "truncated" if len(data) < expected else "longer than its header says"
        raise FormatError(
            f"{path} is {state}: header promises shape {tuple(shape)} of {dtype} ({expected} bytes), "
            f"file has {len(data)} bytes"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(shape)
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write `array` as an IDX file, gzipped when `path` ends in `.gz`.

    Args:
        path: destination; parent folders are created.
        array: any shape of rank >= 1; dtype uint8 (MNIST's), int8, int16, int32, float32 or float64.

    Returns:
        The path written.
    """
    path = Path(path)
    array = np.asarray(array)
    codes = {dt.newbyteorder("="): code for code, dt in _IDX_DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None or array.ndim == 0:
        raise ValueError(f"IDX stores arrays of rank >= 1 with dtype in {sorted(map(str, codes))}, got {array.dtype}")
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + np.ascontiguousarray(array, dtype=_IDX_DTYPES[code]).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(payload) if path.suffix == ".gz" else payload)
    return path


# ---------------------------------------------------------------- CIFAR python pickles


def _numpy_module(name: str) -> Any:
    """numpy 2 moved `numpy.core` to `numpy._core`; old pickles (the real CIFAR files) name the old module."""
    try:
        return importlib.import_module(name.replace("numpy.core", "numpy._core"))
    except ImportError:
        return importlib.import_module(name.replace("numpy._core", "numpy.core"))


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds dicts, lists, strings and numpy arrays and refuses any other global.

    The CIFAR batches are pickles; this keeps a stray or hostile file from running code when it is loaded.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module.replace("numpy._core", "numpy.core"), name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: CIFAR files hold only numpy arrays")
        return getattr(_numpy_module(module) if module.startswith("numpy") else importlib.import_module(module), name)


def _load_pickle(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        try:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
            raise FormatError(f"{path} is not a readable CIFAR python pickle ({type(err).__name__}: {err})") from err
    if not isinstance(obj, dict):
        raise FormatError(f"{path} is not a CIFAR python pickle: it holds a {type(obj).__name__}, not a dict")
    # Python 2 pickles (the released files) load with bytes keys, ours with str keys.
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _field(batch: dict[str, Any], key: str, path: Path) -> Any:
    if key not in batch:
        raise FormatError(f"{path} has no '{key}' entry (found {sorted(batch)})")
    return batch[key]


def read_cifar_batch(path: str | Path, *, fine: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR python batch (`data_batch_1`, `test_batch`; CIFAR-100's `train`, `test`).

    Each row of the stored `data` holds 1024 red, then 1024 green, then 1024 blue bytes in row-major order, so a
    reshape gives channel-first images without copying.

    Args:
        path: the batch file.
        fine: read CIFAR-100's `fine_labels` (100 classes) instead of CIFAR-10's `labels`.

    Returns:
        `(images, labels)`: uint8 `[n, 3, 32, 32]` (C, H, W) and int64 `[n]`.

    Raises:
        FormatError: not a pickle of the expected dict, or shapes that do not match.
    """
    path = Path(path)
    batch = _load_pickle(path)
    data = np.asarray(_field(batch, "data", path))
    labels = np.asarray(_field(batch, "fine_labels" if fine else "labels", path), dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or labels.shape != data.shape[:1]:
        raise FormatError(
            f"{path}: expected uint8 data [n, 3072] and n labels, got data {data.dtype} {data.shape} "
            f"and labels {labels.shape}"
        )
    return data.reshape(-1, 3, 32, 32), labels


def read_cifar_meta(path: str | Path, *, fine: bool = False) -> list[str]:
    """Class names from `batches.meta` (CIFAR-10 `label_names`) or `meta` (CIFAR-100 `fine_label_names`)."""
    path = Path(path)
    names = _field(_load_pickle(path), "fine_label_names" if fine else "label_names", path)
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def _dump(path: Path, obj: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=4)
    return path


def write_cifar_batch(
    path: str | Path,
    images: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    fine: bool = False,
    coarse_labels: Sequence[int] | np.ndarray | None = None,
) -> Path:
    """Write a CIFAR python batch that `read_cifar_batch` (and torchvision) can read.

    Args:
        path: destination, e.g. `.../cifar-10-batches-py/data_batch_1`.
        images: uint8 `[n, 32, 32, 3]` (H, W, C, as PIL and numpy images usually are); stored channel-first.
        labels: `n` class indices.
        fine: write CIFAR-100 keys (`fine_labels` and `coarse_labels`) instead of CIFAR-10's `labels`.
        coarse_labels: CIFAR-100 superclass indices; zeros when omitted.

    Returns:
        The path written.
    """
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (32, 32, 3):
        raise ValueError(f"images must be uint8 [n, 32, 32, 3], got {images.dtype} {images.shape}")
    labels = [int(v) for v in np.asarray(labels).reshape(-1)]
    if len(labels) != len(images):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    batch: dict[str, Any] = {
        "batch_label": Path(path).name,
        "data": np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), -1),
        "filenames": [f"image_{i:05d}.png" for i in range(len(images))],
    }
    if fine:
        batch["fine_labels"] = labels
        coarse = np.zeros(len(labels), np.int64) if coarse_labels is None else np.asarray(coarse_labels)
        batch["coarse_labels"] = [int(v) for v in coarse]
    else:
        batch["labels"] = labels
    return _dump(Path(path), batch)


def write_cifar_meta(path: str | Path, names: Sequence[str], *, fine: bool = False) -> Path:
    """Write `batches.meta` (CIFAR-10) or, with `fine`, CIFAR-100's `meta` listing the class names."""
    names = [str(n) for n in names]
    meta = {"fine_label_names": names, "coarse_label_names": []} if fine else {"label_names": names}
    return _dump(Path(path), meta)


# ---------------------------------------------------------------- ImageFolder trees


def list_image_folder(root: str | Path) -> dict[str, list[Path]]:
    """Class name -> sorted image paths for a `root/<class>/<image>` tree; classes sorted by name (torchvision's rule).

    Only files whose suffix is in `IMAGE_SUFFIXES` count; hidden folders are skipped.
    """
    root = Path(root)
    tree = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        tree[folder.name] = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    return tree


def scan_images(paths: Sequence[Path], *, threads: int = 16) -> None:
    """Check that every file opens as an image, reading only its header (PIL opens lazily): a corrupt or foreign
    file is found before training rather than when a batch reaches it, hours in. Threads hide the file system's
    latency on a network disk.

    Raises:
        FormatError: naming every file that is not a readable image, and why.
    """
    from concurrent.futures import ThreadPoolExecutor

    def problem(path: Path) -> str | None:
        try:
            with Image.open(path) as im:
                return None if im.size[0] > 0 and im.size[1] > 0 else "an image of size 0"
        except Exception as err:  # unreadable, not an image, a decompression bomb: each named, none raised here
            return str(err).splitlines()[0] if str(err) else type(err).__name__

    with ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
        bad = [(p, why) for p, why in zip(paths, pool.map(problem, paths), strict=True) if why is not None]
    if bad:
        listed = "\n".join(f"  {path}: {why}" for path, why in bad)
        raise FormatError(f"{len(bad)} of {len(paths)} image files cannot be read; move or replace them:\n{listed}")


def read_images(paths: Sequence[Path], *, size: tuple[int, int] | None = None, grayscale: bool = False) -> np.ndarray:
    """Decode image files into one preallocated uint8 array `[n, H, W, C]` (C = 1 if grayscale else 3).

    Args:
        paths: image files.
        size: `(H, W)` to resize every image to (bilinear); None keeps the files' size, which must then agree.
        grayscale: convert to one luminance channel instead of RGB.

    Raises:
        FormatError: a file PIL cannot decode, or (with `size=None`) images of different sizes.
    """
    channels = 1 if grayscale else 3
    out: np.ndarray | None = None
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as im:
                im = im.convert("L" if grayscale else "RGB")
                if size is not None and im.size != (size[1], size[0]):
                    im = im.resize((size[1], size[0]), Image.Resampling.BILINEAR)
                pixels = np.asarray(im, dtype=np.uint8).reshape(im.size[1], im.size[0], channels)
        except (UnidentifiedImageError, OSError) as err:
            raise FormatError(f"{path} is not a readable image ({err})") from err
        if out is None:
            out = np.empty((len(paths), *pixels.shape), np.uint8)
        elif pixels.shape != out.shape[1:]:
            raise FormatError(
                f"{path} is {pixels.shape[1]}x{pixels.shape[0]}, others are {out.shape[2]}x{out.shape[1]}: "
                "pass image_size= to resize them to one size"
            )
        out[i] = pixels
    return np.empty((0, *(size or (0, 0)), channels), np.uint8) if out is None else out


def make_synthetic_image_folder(
    root: str | Path, *, classes: int = 3, per_class: int = 8, size: int = 16, seed: int = 0, split: bool = True
) -> Path:
    """Write a small ImageFolder tree of PNG stripes whose orientation gives the class, for tests and demos.

    Class k has stripes at angle 180°·k/classes (folder `stripes_<deg>deg`, so sorted order is k's order) with a
    random phase, period and colour per image plus pixel noise: easy to learn, not trivially constant.

    Args:
        root: folder to write into (created).
        classes: number of classes, at most 180.
        per_class: images per class (in each of `train/` and `val/` when `split`).
        size: image side in pixels.
        seed: seeds every random choice; the same seed writes the same pixels.
        split: write `root/train/<class>` and `root/val/<class>`; otherwise `root/<class>`.

    Returns:
        `root` as a Path.
    """
    if not 1 <= classes <= 180:
        raise ValueError(f"classes must be in 1..180, got {classes}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size  # [size, size] each, in [0, 1)
    for part in ("train", "val") if split else ("",):
        for k in range(classes):
            deg = round(180 * k / classes)
            folder = root / part / f"stripes_{deg:03d}deg"
            folder.mkdir(parents=True, exist_ok=True)
            theta = np.deg2rad(deg)
            phase = rng.uniform(0, 2 * np.pi, (per_class, 1, 1))
            period = rng.uniform(0.25, 0.4, (per_class, 1, 1))
            along = xx * np.cos(theta) + yy * np.sin(theta)  # coordinate across the stripes
            wave = 0.5 + 0.5 * np.sin(2 * np.pi * along / period + phase)  # [per_class, size, size]
            colour = rng.uniform(0.5, 1.0, (per_class, 1, 1, 3))
            pixels = wave[..., None] * colour + rng.normal(0, 0.05, (per_class, size, size, 3))
            pixels = (np.clip(pixels, 0, 1) * 255).round().astype(np.uint8)  # [per_class, size, size, 3]
            for i, image in enumerate(pixels):
                Image.fromarray(image).save(folder / f"{i:04d}.png")
    return root
