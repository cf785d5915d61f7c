"""Image datasets for the analysis experiments, by name: one `ImageSplit` of float tensors per dataset.

*Residual Alignment: Uncovering the Mechanisms of Residual Networks* trains on MNIST, FashionMNIST, CIFAR-10/100
and ImageNette, and on subsets of 2, 4, 6 and 8 classes to see how Residual Alignment's rank follows the number of
classes; `classes=` gives those subsets everywhere. scikit-learn's 8x8 digits ship with the lab so every page and
test has real images without a download. The other sets are read from a local folder and **never downloaded**: a
missing file is a `DatasetNotFoundError` that says which files to put where.

Conventions: images are float32 `[n, C, H, W]` in [0, 1] (before `normalized`), labels int64 in `0..C-1`. A class
subset is relabelled in the order given and `ImageSplit.source_labels` keeps the original label of each new one.
`max_per_class` and `limit` keep the first examples in file order, so small runs are reproducible.

This module is the public face of the image data; the work is done in one module per concept:

- :mod:`lab.data.formats`: the on-disk formats (IDX, CIFAR pickles, ImageFolder trees), bytes to numpy arrays;
- :mod:`lab.data.subsets`: class subsets, per-class caps and stratified splits, on labels alone;
- :mod:`lab.data.readers`: one loader per dataset, from a folder to an `ImageSplit`;
- :mod:`lab.data.image_split`: `ImageSplit` itself and its transforms (`flat`, `normalized`, `standardize`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lab.data.formats import make_synthetic_image_folder
from lab.data.image_split import ImageSplit
from lab.data.readers import (
    NEVER_DOWNLOADS,
    DatasetNotFoundError,
    load_cifar,
    load_digits,
    load_image_folder,
    load_mnist,
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
            raise ValueError(f"{key} is read from a local folder: pass root= ({NEVER_DOWNLOADS}; only 'digits' ships)")
        return IMAGE_DATASETS[key](root, **kwargs)
    return IMAGE_DATASETS[key](**kwargs)
