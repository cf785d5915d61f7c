"""Loading an image dataset by name: the registry and its errors."""

import numpy as np
import pytest
import torch

from lab.data.formats import write_idx
from lab.data.images import IMAGE_DATASETS, load_images

MNIST_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def write_tiny_mnist(folder):
    rng = np.random.default_rng(0)
    for stem, n in zip(MNIST_STEMS, (6, 6, 2, 2), strict=True):
        images = "images" in stem
        write_idx(folder / (stem + ".gz"), rng.integers(0, 256 if images else 10, (n, 5, 7) if images else (n,),
                                                        dtype=np.uint8))


def test_load_images_dispatch(tmp_path, digits):
    assert torch.equal(load_images("digits").x_test, digits.x_test)
    assert load_images("Digits", classes=2).num_classes == 2
    with pytest.raises(ValueError) as info:
        load_images("imagenet")
    for name in ("digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "image_folder"):
        assert name in str(info.value)
    assert set(IMAGE_DATASETS) == {"digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "image_folder"}
    with pytest.raises(ValueError, match="root"):
        load_images("cifar10")
    write_tiny_mnist(tmp_path / "FashionMNIST" / "raw")
    assert load_images("fashion-mnist", tmp_path).classes[-1] == "Ankle boot"
    with pytest.raises(FileNotFoundError, match="MNIST"):
        load_images("mnist", tmp_path)
