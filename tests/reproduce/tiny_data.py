"""Tiny copies of the full-scale data sets, in the formats the lab reads (the tests make them; nothing is
downloaded): MNIST's idx files, CIFAR-10's Python batches and image folders standing in for CIFAR-100 and
ImageNet-100."""

from pathlib import Path

import numpy as np
from PIL import Image

from lab.data.formats import write_cifar_batch, write_cifar_meta, write_idx

MNIST = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def mnist(root: Path, train: int = 64, test: int = 32) -> Path:
    rng = np.random.default_rng(0)
    for stem, n in zip(MNIST, (train, train, test, test), strict=True):
        shape = (n, 28, 28) if "images" in stem else (n,)
        write_idx(root / (stem + ".gz"), rng.integers(0, 256 if "images" in stem else 10, shape, dtype=np.uint8))
    return root


def cifar10(root: Path, per_batch: int = 16, test: int = 32) -> Path:
    rng = np.random.default_rng(1)
    folder = root / "cifar-10-batches-py"
    for name, n in [*((f"data_batch_{i}", per_batch) for i in range(1, 6)), ("test_batch", test)]:
        write_cifar_batch(folder / name, rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                          rng.integers(0, 10, n))
    write_cifar_meta(folder / "batches.meta", [f"class{i}" for i in range(10)])
    return root


def image_folder(root: Path, classes: int = 4, train: int = 12, val: int = 6, size: int = 32) -> Path:
    rng = np.random.default_rng(2)
    for split, n in (("train", train), ("val", val)):
        for c in range(classes):
            (root / split / f"c{c}").mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / f"c{c}" / f"{i}.png")
    return root
