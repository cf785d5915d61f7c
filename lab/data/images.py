"""Image datasets for the analysis experiments: one `ImageSplit` of float tensors per dataset.

Seed 004 trains on MNIST, FashionMNIST, CIFAR-10/100 and ImageNette, and on subsets of 2, 4, 6 and 8 classes to see
how Residual Alignment's rank follows the number of classes; `classes=` gives those subsets everywhere. scikit-learn's
8x8 digits ship with the lab so every page and test has real images without a download. The other sets are read from
a local folder and **never downloaded**: a missing file is a `DatasetNotFoundError` that says which files to put
where.

Conventions: images are float32 `[n, C, H, W]` in [0, 1] (before `normalized`), labels int64 in `0..C-1`. A class
subset is relabelled in the order given and `ImageSplit.source_labels` keeps the original label of each new one.
`max_per_class` and `limit` keep the first examples in file order, so small runs are reproducible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from lab.data.formats import (
    FormatError,
    list_image_folder,
    make_synthetic_image_folder,
    read_cifar_batch,
    read_cifar_meta,
    read_idx,
    read_images,
)

__all__ = [
    "IMAGE_DATASETS",
    "DatasetNotFoundError",
    "ImageSplit",
    "load_cifar",
    "load_digits",
    "load_image_folder",
    "load_images",
    "load_mnist",
    "make_synthetic_image_folder",
]

Classes = int | Sequence[int | str] | None

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
_NEVER = "Residual Lab never downloads datasets"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where the lab looks; the message lists the files expected and where to put them."""


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ImageSplit:
    """A train/test pair of image tensors with class names.

    Attributes:
        x_train: float32 `[n_train, C, H, W]` (`[n_train, D]` after `flat()`).
        y_train: int64 `[n_train]` in `0..num_classes-1`.
        x_test: float32 `[n_test, C, H, W]`.
        y_test: int64 `[n_test]`.
        classes: name of each label.
        name: dataset name, e.g. "mnist".
        source_labels: original dataset label of each label, for class subsets (default: identity).
        mean: per-channel mean subtracted by `normalized` (None: raw [0, 1] pixels); keep it to undo normalization.
        std: per-channel std divided by `normalized`.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[str, ...]
    name: str
    source_labels: tuple[int, ...] = ()
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(self.classes))
        object.__setattr__(self, "source_labels", tuple(self.source_labels) or tuple(range(len(self.classes))))
        for x, y, part in ((self.x_train, self.y_train, "train"), (self.x_test, self.y_test, "test")):
            if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
                raise ValueError(f"{part}: need x [n, ...] and y [n], got {tuple(x.shape)} and {tuple(y.shape)}")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(f"train and test shapes differ: {self.x_train.shape[1:]} vs {self.x_test.shape[1:]}")
        if len(self.source_labels) != len(self.classes):
            raise ValueError(f"{len(self.classes)} classes but {len(self.source_labels)} source labels")

    @property
    def num_classes(self) -> int:
        """Number of classes C (labels are `0..C-1`)."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input: `(C, H, W)`, or `(D,)` after `flat()`."""
        return tuple(self.x_train.shape[1:])

    def __repr__(self) -> str:
        norm = "raw" if self.mean is None else "normalized"
        return (
            f"ImageSplit(name={self.name!r}, train={len(self.x_train)}, test={len(self.x_test)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes}, {norm})"
        )

    def flat(self) -> ImageSplit:
        """Same split with inputs flattened to `[n, C*H*W]` views (no copy), for fully-connected ResNets."""
        return dataclasses.replace(self, x_train=self.x_train.flatten(1), x_test=self.x_test.flatten(1))

    def normalized(self, mean: float | Sequence[float], std: float | Sequence[float]) -> ImageSplit:
        """Return `(x - mean) / std` per channel (dim 1), applied to train and test alike.

        Args:
            mean: one value, or one per channel (per feature after `flat()`).
            std: same form as `mean`; must be positive.

        Normalizing twice composes: `mean`/`std` on the result describe the whole map from raw pixels.
        """
        m = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
        s = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
        channels = self.x_train.shape[1]
        if len(m) not in (1, channels) or len(s) not in (1, channels) or bool((s <= 0).any()):
            raise ValueError(f"mean/std need 1 or {channels} values and std > 0, got {mean!r}, {std!r}")
        view = (1, -1) + (1,) * (self.x_train.ndim - 2)  # broadcast over dim 1
        mean_all, std_all = m.expand(channels), s.expand(channels)
        if self.mean is not None:  # (x - m0)/s0 then (. - m)/s  ==  (x - (m0 + m*s0)) / (s0*s)
            if len(self.mean) != channels:
                raise ValueError("already normalized per channel: normalize again before flat(), not after")
            m0, s0 = torch.tensor(self.mean), torch.tensor(self.std)
            mean_all, std_all = m0 + mean_all * s0, s0 * std_all
        return dataclasses.replace(
            self,
            x_train=(self.x_train - m.reshape(view)) / s.reshape(view),
            x_test=(self.x_test - m.reshape(view)) / s.reshape(view),
            mean=tuple(mean_all.tolist()),
            std=tuple(std_all.tolist()),
        )

    def standardize(self) -> ImageSplit:
        """Normalize with the per-channel mean and std of the *training* images (test statistics never leak in)."""
        dims = [d for d in range(self.x_train.ndim) if d != 1]
        std, mean = torch.std_mean(self.x_train, dim=dims, correction=0)
        return self.normalized(mean.tolist(), std.clamp_min(1e-8).tolist())

    def datasets(self) -> tuple[TensorDataset, TensorDataset]:
        """`(train, test)` as `TensorDataset`s for a `DataLoader`."""
        return TensorDataset(self.x_train, self.y_train), TensorDataset(self.x_test, self.y_test)


# ---------------------------------------------------------------- selection and splitting (labels only)


def _resolve_classes(names: Sequence[str], classes: Classes) -> list[int]:
    """Original label ids kept, in the new label order. An int k keeps the first k classes (seed 004's subsets)."""
    if classes is None:
        return list(range(len(names)))
    if isinstance(classes, int):
        if not 1 <= classes <= len(names):
            raise ValueError(f"classes={classes}: this dataset has {len(names)} classes")
        return list(range(classes))
    chosen = []
    for c in classes:
        if isinstance(c, str) and c in names:
            chosen.append(names.index(c))
        elif isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c < len(names):
            chosen.append(int(c))
        else:
            raise ValueError(f"unknown class {c!r}; valid: indices 0..{len(names) - 1} or names {list(names)}")
    if not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"classes must be a non-empty list without repeats, got {list(classes)}")
    return chosen


def _select(
    labels: np.ndarray, source: list[int], max_per_class: int | None = None, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the examples kept (file order) and their new labels."""
    lut = np.full(max(int(labels.max(initial=0)), *source) + 1, -1, np.int64)
    lut[source] = np.arange(len(source))
    new = lut[labels]
    keep = np.flatnonzero(new >= 0)
    if max_per_class is not None:
        keep = np.sort(np.concatenate([keep[new[keep] == c][:max_per_class] for c in range(len(source))]))
    if limit is not None:
        keep = keep[:limit]
    return keep, new[keep]


def _stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split keeping each class's share: round(n_c * test_fraction) test examples, >= 1 each side if n_c >= 2."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(len(idx) * test_fraction))
        n_test = min(max(n_test, 1), len(idx) - 1) if len(idx) >= 2 else 0
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


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
    source = _resolve_classes(names, classes)
    (tr, y_tr), (te, y_te) = (_select(y, source, max_per_class, limit) for _, y in (train, test))
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
    return DatasetNotFoundError(f"{what} not found. Expected {', '.join(files)} {scope}:\n{places}\n{hint} ({_NEVER}.)")


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
    source = _resolve_classes(names, classes)
    keep, labels = _select(bunch.target.astype(np.int64), source)
    tr, te = _stratified_split(labels, test_fraction, seed)
    x = _resize(torch.from_numpy((bunch.images[keep] / 16.0).astype(np.float32)).unsqueeze(1), image_size)
    y = torch.from_numpy(labels)
    return ImageSplit(x[tr], y[tr], x[te], y[te], tuple(names[i] for i in source), "digits", tuple(source))


def _find_mnist_files(root: Path, kind: str) -> dict[str, Path]:
    """Each IDX file's path (raw preferred over .gz) in the first candidate folder that holds any of them."""
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
    files = _find_mnist_files(Path(root), kind)
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
    folder_name, train_files, test_file, meta_file = _CIFAR[num_classes]
    root = Path(root)
    expected = [*train_files, test_file, meta_file]
    candidates = [root / folder_name, root]
    folder = next((c for c in candidates if all((c / f).is_file() for f in expected)), None)
    if folder is None:
        raise _missing(
            f"CIFAR-{num_classes} batches",
            expected,
            candidates,
            f"Extract the official python tarball so they sit in {root / folder_name}.",
        )
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
    """An ImageFolder tree (e.g. ImageNette) decoded with PIL; class names are the sorted folder names.

    With `root/train/<class>/*` and `root/val/<class>/*` (or `root/test/`), those are the splits. Otherwise
    `root/<class>/*` is one tree, split per class with `test_fraction` and `seed`.

    Args:
        root: the tree.
        image_size: side (or `(H, W)`) every image is resized to; None keeps the files' size, which must agree.
        grayscale: one luminance channel instead of RGB.
        classes: None, the first k classes, or a list of class indices or folder names.
        max_per_class: read at most this many files per class (per split for train/val trees, before splitting
            for a single tree); files are taken in sorted order, and the rest are never opened.
        limit: keep at most this many examples in each of train and test.
        test_fraction: held-out share per class, single tree only.
        seed: seeds the split, single tree only.

    Returns:
        `ImageSplit` named after the folder, float32 `[n, C, H, W]` in [0, 1], C = 1 if grayscale else 3.

    Raises:
        DatasetNotFoundError: `root` is missing or holds no class folders with images.
    """
    root = Path(root)
    train_dir = root / "train" if (root / "train").is_dir() else root
    test_dir = next((root / d for d in ("val", "test") if (root / d).is_dir() and train_dir != root), None)
    split_dirs = (train_dir, test_dir)
    layout = "root/train/<class>/*.png|jpg and root/val/<class>/*, or root/<class>/*.png|jpg"
    trees = [list_image_folder(d) if d is not None else None for d in split_dirs] if root.is_dir() else [{}]
    if not trees[0] or not any(trees[0].values()):
        raise DatasetNotFoundError(f"no images found under {root}: expected an ImageFolder tree, {layout} ({_NEVER}).")
    names = tuple(trees[0])
    source = _resolve_classes(names, classes)
    size = (image_size, image_size) if isinstance(image_size, int) else image_size

    def read(tree: dict[str, list[Path]]) -> tuple[np.ndarray, np.ndarray]:
        unknown = sorted(set(tree) - set(names))
        if unknown:
            raise ValueError(f"{split_dirs[1]} has classes {unknown} that {split_dirs[0]} lacks")
        files = [tree.get(names[s], [])[:max_per_class] for s in source]
        labels = np.repeat(np.arange(len(source)), [len(f) for f in files])
        return read_images([p for f in files for p in f], size=size, grayscale=grayscale), labels

    x, y = read(trees[0])
    if trees[1] is None:
        tr, te = _stratified_split(y, test_fraction, seed)
        (x_tr, y_tr), (x_te, y_te) = (x[tr], y[tr]), (x[te], y[te])
    else:
        (x_tr, y_tr), (x_te, y_te) = (x, y), read(trees[1])
    x_tr, y_tr, x_te, y_te = x_tr[:limit], y_tr[:limit], x_te[:limit], y_te[:limit]
    return ImageSplit(
        x_train=_to_float(x_tr.transpose(0, 3, 1, 2)),
        y_train=torch.from_numpy(y_tr.astype(np.int64)),
        x_test=_to_float(x_te.transpose(0, 3, 1, 2)),
        y_test=torch.from_numpy(y_te.astype(np.int64)),
        classes=tuple(names[s] for s in source),
        name=root.resolve().name,
        source_labels=tuple(source),
    )


IMAGE_DATASETS: dict[str, Callable[..., ImageSplit]] = {
    "digits": lambda root=None, **kw: load_digits(**kw),
    "mnist": lambda root, **kw: load_mnist(root, kind="mnist", **kw),
    "fashion_mnist": lambda root, **kw: load_mnist(root, kind="fashion", **kw),
    "cifar10": lambda root, **kw: load_cifar(root, num_classes=10, **kw),
    "cifar100": lambda root, **kw: load_cifar(root, num_classes=100, **kw),
    "image_folder": lambda root, **kw: load_image_folder(root, **kw),
}


def load_images(name: str, root: str | Path | None = None, **kwargs) -> ImageSplit:
    """Load an image dataset by name: one of `IMAGE_DATASETS` ("digits" needs no `root`).

    Args:
        name: "digits", "mnist", "fashion_mnist", "cifar10", "cifar100" or "image_folder" (case and "-" forgiven).
        root: local data folder; required for all but "digits".
        **kwargs: passed to the loader, e.g. `classes=4`, `max_per_class=100`.
    """
    key = name.lower().replace("-", "_")
    if key not in IMAGE_DATASETS:
        raise ValueError(f"unknown image dataset {name!r}; valid names: {', '.join(IMAGE_DATASETS)}")
    if key != "digits":
        if root is None:
            raise ValueError(f"{key} is read from a local folder: pass root= ({_NEVER}; only 'digits' ships)")
        return IMAGE_DATASETS[key](root, **kwargs)
    return IMAGE_DATASETS[key](**kwargs)
