"""One loader per image dataset: scikit-learn's digits, MNIST/FashionMNIST, CIFAR-10/100 and ImageFolder trees.

Each loader finds its files, reads them with :mod:`lab.data.formats`, keeps the classes and examples asked for
(:mod:`lab.data.subsets`, on the labels first, so only kept images are converted) and returns one
:class:`~lab.data.image_split.ImageSplit` of float32 images in [0, 1]. scikit-learn's 8x8 digits ship with the lab;
every other set is read from a local folder and **never downloaded**: a missing file is a `DatasetNotFoundError`
that says which files to put where.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lab.data.formats import (
    FormatError,
    list_image_folder,
    read_cifar_batch,
    read_cifar_meta,
    read_idx,
    read_images,
    scan_images,
)
from lab.data.image_split import ImageSplit
from lab.data.subsets import Classes, resolve_classes, select, stratified_split

__all__ = [
    "FASHION_CLASSES",
    "MNIST_FILES",
    "NEVER_DOWNLOADS",
    "DatasetNotFoundError",
    "find_cifar_folder",
    "find_mnist_files",
    "load_cifar",
    "load_digits",
    "image_folder_files",
    "load_image_folder",
    "load_mnist",
]

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
_CIFAR = {  # num_classes -> (folder torchvision extracts, train batches, test batch, meta file)
    10: ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"),
    100: ("cifar-100-python", ("train",), "test", "meta"),
}
NEVER_DOWNLOADS = "Residual Lab never downloads datasets"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where the lab looks; the message lists the files expected and where to put them."""


# ---------------------------------------------------------------- pixels and assembly


def _to_float(images: np.ndarray) -> torch.Tensor:
    """uint8 `[n, H, W]` or `[n, C, H, W]` -> float32 `[n, C, H, W]` in [0, 1]."""
    x = torch.from_numpy(np.ascontiguousarray(images))
    x = x.unsqueeze(1) if x.ndim == 3 else x
    return x.to(torch.float32).div_(255.0)


def _resize(x: torch.Tensor, size: int | tuple[int, int]) -> torch.Tensor:
    size = (size, size) if isinstance(size, int) else tuple(size)
    if tuple(x.shape[-2:]) == size:
        return x
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=True).clamp_(0.0, 1.0)


def _split_from_arrays(
    name: str,
    names: Sequence[str],
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    classes: Classes,
    max_per_class: int | None,
    limit: int | None,
) -> ImageSplit:
    """Select classes and caps on the uint8 arrays first, so only the kept images are converted to float."""
    source = resolve_classes(names, classes)
    (tr, y_tr), (te, y_te) = (select(y, source, max_per_class, limit) for _, y in (train, test))
    return ImageSplit(
        x_train=_to_float(train[0][tr]),
        y_train=torch.from_numpy(y_tr),
        x_test=_to_float(test[0][te]),
        y_test=torch.from_numpy(y_te),
        classes=tuple(names[i] for i in source),
        name=name,
        source_labels=tuple(source),
    )


def _missing(what: str, files: Sequence[str], where: Sequence[Path], hint: str) -> DatasetNotFoundError:
    places = "\n".join(f"  {p}" for p in where)
    scope = "in" if len(where) == 1 else "in one of"
    return DatasetNotFoundError(
        f"{what} not found. Expected {', '.join(files)} {scope}:\n{places}\n{hint} ({NEVER_DOWNLOADS}.)"
    )


# ---------------------------------------------------------------- datasets


def load_digits(
    *, classes: Classes = None, image_size: int | tuple[int, int] = 8, test_fraction: float = 0.25, seed: int = 0
) -> ImageSplit:
    """scikit-learn's handwritten digits: 1,797 grey 8x8 images of 10 classes, shipped with sklearn (no download).

    Args:
        classes: None for all; k for the first k digits; or a list of digits (ints or names "0".."9"), relabelled
            0..len-1 in the order given.
        image_size: output side (or `(H, W)`); other than 8 resizes bilinearly, e.g. to feed a CIFAR-sized ResNet.
        test_fraction: share of each class held out for testing.
        seed: seeds the stratified split; the same seed gives the same split.

    Returns:
        `ImageSplit` named "digits" with float32 `[n, 1, H, W]` in [0, 1] (sklearn's 0..16 grey levels / 16).
    """
    from sklearn.datasets import load_digits as sklearn_digits  # sklearn is heavy; only this loader needs it

    bunch = sklearn_digits()
    names = tuple(str(n) for n in bunch.target_names)
    source = resolve_classes(names, classes)
    keep, labels = select(bunch.target.astype(np.int64), source)
    tr, te = stratified_split(labels, test_fraction, seed)
    x = _resize(torch.from_numpy((bunch.images[keep] / 16.0).astype(np.float32)).unsqueeze(1), image_size)
    y = torch.from_numpy(labels)
    return ImageSplit(x[tr], y[tr], x[te], y[te], tuple(names[i] for i in source), "digits", tuple(source))


def write_digits_folder(root: str | Path, *, image_size: int = 32, every: int = 1, seed: int = 0) -> Path:
    """scikit-learn's digits written as an ImageFolder tree, ``root/train/<digit>/*.png`` and
    ``root/val/<digit>/*.png`` (:func:`load_digits`'s split), every ``every``-th image: the loader engine's file
    path, exercised on data that ships with the lab. A folder that exists already is returned as it is.

    Returns:
        ``root`` as a Path.
    """
    from PIL import Image

    root = Path(root)
    if root.is_dir():
        return root
    digits = load_digits(image_size=image_size, seed=seed)
    partial = root.with_name(f".{root.name}.partial")  # renamed into place once whole: no half-written tree
    for split, x, y in (("train", digits.x_train, digits.y_train), ("val", digits.x_test, digits.y_test)):
        for i, (image, label) in enumerate(zip(x[::every], y[::every], strict=True)):
            folder = partial / split / str(int(label))
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((image[0].numpy() * 255).round().astype(np.uint8)).save(folder / f"{i:04d}.png")
    partial.rename(root)
    return root


def find_mnist_files(root: Path, kind: str = "mnist") -> dict[str, Path]:
    """Each IDX file's path (raw preferred over .gz) in the first candidate folder that holds any of them.

    Raises:
        DatasetNotFoundError: they are not all there (the message names what is missing and where it looked).
    """
    layout = "FashionMNIST" if kind == "fashion" else "MNIST"
    candidates = [root, root / "raw", root / layout / "raw"]
    expected = [f"{stem}(.gz)" for stem in MNIST_FILES]
    for folder in candidates:
        found = {s: folder / n for s in reversed(MNIST_FILES) for n in (s + ".gz", s) if (folder / n).is_file()}
        if len(found) == len(MNIST_FILES):
            return found
        if found:  # a half-copied folder: say exactly what is missing rather than looking elsewhere
            missing = [e for s, e in zip(MNIST_FILES, expected, strict=True) if s not in found]
            raise _missing(f"{layout} files {', '.join(missing)}", expected, [folder], "Put all four together.")
    hint = f"Put them in {root / layout / 'raw'} (torchvision's layout) or directly in {root}."
    raise _missing(f"{layout} files", expected, candidates, hint)


def load_mnist(
    root: str | Path,
    *,
    kind: str = "mnist",
    classes: Classes = None,
    max_per_class: int | None = None,
    limit: int | None = None,
) -> ImageSplit:
    """MNIST or FashionMNIST from the four IDX files in a local folder (never downloaded).

    Looks in `root`, `root/raw`, then `root/MNIST/raw` (`root/FashionMNIST/raw` for "fashion"), torchvision's layout,
    so a torchvision data folder works as is. Each file may be raw or `.gz`.

    Args:
        root: data folder.
        kind: "mnist" or "fashion".
        classes: None, the first k classes, or a list of class indices or names.
        max_per_class: keep at most this many examples per class in each of train and test.
        limit: keep at most this many examples in each of train and test.

    Returns:
        `ImageSplit` named "mnist" or "fashion_mnist", float32 `[n, 1, 28, 28]` in [0, 1]; 60,000/10,000 in full.

    Raises:
        DatasetNotFoundError: the files are not in any of those folders.
        FormatError: a file is not valid IDX, or images and labels disagree.
    """
    if kind not in ("mnist", "fashion"):
        raise ValueError(f"kind must be 'mnist' or 'fashion', got {kind!r}")
    files = find_mnist_files(Path(root), kind)
    arrays = {stem: read_idx(path) for stem, path in files.items()}
    for img, lab in ((MNIST_FILES[0], MNIST_FILES[1]), (MNIST_FILES[2], MNIST_FILES[3])):
        x, y = arrays[img], arrays[lab]
        if x.ndim != 3 or x.dtype != np.uint8 or y.ndim != 1 or len(x) != len(y) or (len(y) and y.max() > 9):
            raise FormatError(
                f"{files[img]} / {files[lab]}: expected uint8 images [n, H, W] and n labels in 0..9, "
                f"got {x.dtype} {x.shape} and {y.dtype} {y.shape}"
            )
    names = FASHION_CLASSES if kind == "fashion" else tuple(str(i) for i in range(10))
    train = (arrays[MNIST_FILES[0]], arrays[MNIST_FILES[1]].astype(np.int64))
    test = (arrays[MNIST_FILES[2]], arrays[MNIST_FILES[3]].astype(np.int64))
    name = "fashion_mnist" if kind == "fashion" else "mnist"
    return _split_from_arrays(name, names, train, test, classes, max_per_class, limit)


def find_cifar_folder(root: Path, num_classes: int = 10) -> Path:
    """The folder holding CIFAR-10's (or CIFAR-100's) python batches: ``root/cifar-10-batches-py`` or ``root``.

    Raises:
        DatasetNotFoundError: neither holds them all (the message names the files and where it looked).
    """
    folder_name, train_files, test_file, meta_file = _CIFAR[num_classes]
    expected = [*train_files, test_file, meta_file]
    candidates = [root / folder_name, root]
    folder = next((c for c in candidates if all((c / f).is_file() for f in expected)), None)
    if folder is None:
        raise _missing(f"CIFAR-{num_classes} batches", expected, candidates,
                       f"Extract the official python tarball so they sit in {root / folder_name}.")
    return folder


def load_cifar(
    root: str | Path,
    *,
    num_classes: int = 10,
    classes: Classes = None,
    max_per_class: int | None = None,
    limit: int | None = None,
) -> ImageSplit:
    """CIFAR-10 or CIFAR-100 (fine labels) from the python pickle batches in a local folder (never downloaded).

    Looks for `cifar-10-batches-py/` (`cifar-100-python/` for 100 classes) in `root`, or for the batch files directly
    in `root`: where torchvision and the official tarballs put them.

    Args:
        root: data folder.
        num_classes: 10 or 100 (chooses the dataset; `classes` chooses a subset of it).
        classes: None, the first k classes, or a list of class indices or names.
        max_per_class: keep at most this many examples per class in each of train and test.
        limit: keep at most this many examples in each of train and test.

    Returns:
        `ImageSplit` named "cifar10" or "cifar100", float32 `[n, 3, 32, 32]` (RGB channels first) in [0, 1].

    Raises:
        DatasetNotFoundError: a batch or the meta file is missing.
        FormatError: a file is not a CIFAR pickle of the expected shape.
    """
    if num_classes not in _CIFAR:
        raise ValueError(f"num_classes must be 10 or 100, got {num_classes!r}")
    _, train_files, test_file, meta_file = _CIFAR[num_classes]
    folder = find_cifar_folder(Path(root), num_classes)
    fine = num_classes == 100
    names = read_cifar_meta(folder / meta_file, fine=fine)
    if len(names) != num_classes:
        raise FormatError(f"{folder / meta_file} names {len(names)} classes, expected {num_classes}")
    train = [read_cifar_batch(folder / f, fine=fine) for f in train_files]
    x_te, y_te = read_cifar_batch(folder / test_file, fine=fine)
    for f, (_, y) in zip((*train_files, test_file), (*train, (x_te, y_te)), strict=True):
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise FormatError(f"{folder / f} has labels outside 0..{num_classes - 1}")
    x_tr = train[0][0] if len(train) == 1 else np.concatenate([x for x, _ in train])
    y_tr = np.concatenate([y for _, y in train])
    return _split_from_arrays(f"cifar{num_classes}", names, (x_tr, y_tr), (x_te, y_te), classes, max_per_class, limit)


def image_folder_files(
    root: str | Path,
    *,
    classes: Classes = None,
    max_per_class: int | None = None,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> tuple[list[tuple[Path, int]], list[tuple[Path, int]], tuple[str, ...]]:
    """The files of an ImageFolder tree and their labels, split into train and test; no image is opened.

    With `root/train/<class>/*` and `root/val/<class>/*` (or `root/test/`), those are the splits. Otherwise
    `root/<class>/*` is one tree, split per class with `test_fraction` and `seed`. Labels index the kept classes.

    Args:
        root: the tree.
        classes: None, the first k classes, or a list of class indices or folder names.
        max_per_class: at most this many files per class (per split for train/val trees, before splitting for a
            single tree), in sorted order.
        test_fraction: held-out share per class, single tree only.
        seed: seeds the split, single tree only.

    Returns:
        ``(train, test, class_names)``: lists of ``(path, label)``.

    Raises:
        DatasetNotFoundError: `root` is missing or holds no class folders with images.
        FormatError: files that do not open as images (every one named; a header scan, :func:`scan_images`).
        ValueError: the test tree has classes the training tree lacks.
    """
    root = Path(root)
    train_dir = root / "train" if (root / "train").is_dir() else root
    test_dir = next((root / d for d in ("val", "test") if (root / d).is_dir() and train_dir != root), None)
    layout = "root/train/<class>/*.png|jpg and root/val/<class>/*, or root/<class>/*.png|jpg"
    trees = [list_image_folder(d) if d is not None else None for d in (train_dir, test_dir)] if root.is_dir() else [{}]
    if not trees[0] or not any(trees[0].values()):
        raise DatasetNotFoundError(
            f"no images found under {root}: expected an ImageFolder tree, {layout} ({NEVER_DOWNLOADS})."
        )
    names = tuple(trees[0])
    source = resolve_classes(names, classes)

    def files(tree: dict[str, list[Path]]) -> list[tuple[Path, int]]:
        unknown = sorted(set(tree) - set(names))
        if unknown:
            raise ValueError(f"{test_dir} has classes {unknown} that {train_dir} lacks")
        return [(path, label) for label, s in enumerate(source) for path in tree.get(names[s], [])[:max_per_class]]

    train = files(trees[0])
    kept = tuple(names[s] for s in source)
    if trees[1] is not None:
        test = files(trees[1])
        scan_images([path for path, _ in train + test])
        return train, test, kept
    scan_images([path for path, _ in train])
    tr, te = stratified_split(np.array([label for _, label in train], np.int64), test_fraction, seed)
    return [train[i] for i in tr], [train[i] for i in te], kept


def load_image_folder(
    root: str | Path,
    *,
    image_size: int | tuple[int, int] | None = None,
    grayscale: bool = False,
    classes: Classes = None,
    max_per_class: int | None = None,
    limit: int | None = None,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> ImageSplit:
    """An ImageFolder tree (e.g. ImageNette) decoded with PIL into memory; class names are the sorted folder names.

    The files and split are :func:`image_folder_files`'s (see there for the layouts). For trees too large for
    memory, the loader engine reads the same files batch by batch (:mod:`lab.data.keyed`).

    Args:
        root: the tree.
        image_size: side (or `(H, W)`) every image is resized to; None keeps the files' size, which must agree.
        grayscale: one luminance channel instead of RGB.
        classes: None, the first k classes, or a list of class indices or folder names.
        max_per_class: read at most this many files per class; the rest are never opened.
        limit: keep at most this many examples in each of train and test.
        test_fraction: held-out share per class, single tree only.
        seed: seeds the split, single tree only.

    Returns:
        `ImageSplit` named after the folder, float32 `[n, C, H, W]` in [0, 1], C = 1 if grayscale else 3.

    Raises:
        DatasetNotFoundError: `root` is missing or holds no class folders with images.
    """
    root = Path(root)
    train, test, names = image_folder_files(root, classes=classes, max_per_class=max_per_class,
                                            test_fraction=test_fraction, seed=seed)
    size = (image_size, image_size) if isinstance(image_size, int) else image_size

    def read(files: list[tuple[Path, int]]) -> tuple[np.ndarray, np.ndarray]:
        labels = np.array([label for _, label in files], np.int64)
        return read_images([path for path, _ in files], size=size, grayscale=grayscale), labels

    (x_tr, y_tr), (x_te, y_te) = read(train[:limit]), read(test[:limit])
    all_names = tuple(list_image_folder(root / "train" if (root / "train").is_dir() else root))
    return ImageSplit(
        x_train=_to_float(x_tr.transpose(0, 3, 1, 2)),
        y_train=torch.from_numpy(y_tr),
        x_test=_to_float(x_te.transpose(0, 3, 1, 2)),
        y_test=torch.from_numpy(y_te),
        classes=names,
        name=root.resolve().name,
        source_labels=tuple(all_names.index(n) for n in names),
    )
