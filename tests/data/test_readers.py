"""Dataset loaders: shipped digits, MNIST and CIFAR from real on-disk formats (tiny files written here), ImageFolder."""

import gzip
import pickle
import re

import numpy as np
import pytest
import torch

from lab.data.formats import FormatError, read_idx, read_images, write_cifar_batch, write_cifar_meta, write_idx
from lab.data.images import (
    DatasetNotFoundError,
    load_cifar,
    load_digits,
    load_image_folder,
    load_images,
    load_mnist,
    make_synthetic_image_folder,
)

MNIST_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def as_bytes(x: torch.Tensor) -> np.ndarray:
    """Float images in [0, 1] back to the uint8 values they were read from (exact: k/255*255 rounds to k)."""
    return (x * 255).round().to(torch.uint8).numpy()


# ---------------------------------------------------------------- digits (shipped with scikit-learn)


def test_digits_has_1797_images_10_classes_in_unit_range(digits):
    assert len(digits.x_train) + len(digits.x_test) == 1797
    assert digits.num_classes == 10 and digits.classes == tuple("0123456789")
    assert digits.input_shape == (1, 8, 8)
    assert digits.x_train.dtype == torch.float32 and digits.y_train.dtype == torch.int64
    x = torch.cat([digits.x_train, digits.x_test])
    assert x.min() == 0.0 and x.max() == 1.0
    assert set(torch.cat([digits.y_train, digits.y_test]).tolist()) == set(range(10))


def test_digits_pixels_are_sklearn_grey_levels_over_16(digits, sk_digits):
    stored = {img.tobytes() for img in sk_digits.images.astype(np.uint8)}
    levels = (torch.cat([digits.x_train, digits.x_test]) * 16).round().to(torch.uint8).numpy()
    assert all(img[0].tobytes() in stored for img in levels)


@pytest.mark.parametrize(
    ("classes", "sources"), [(2, [0, 1]), (4, [0, 1, 2, 3]), ([7, 3], [7, 3]), (["8", "1"], [8, 1])]
)
def test_digits_class_subset_remaps_labels_and_keeps_only_those(sk_digits, classes, sources):
    split = load_digits(classes=classes)
    assert split.num_classes == len(sources)
    assert split.classes == tuple(str(s) for s in sources) and split.source_labels == tuple(sources)
    y = torch.cat([split.y_train, split.y_test])
    x = torch.cat([split.x_train, split.x_test])
    for new, src in enumerate(sources):  # each new label holds exactly the images of its source digit
        expected = sk_digits.images[sk_digits.target == src].astype(np.uint8)
        got = (x[y == new] * 16).round().to(torch.uint8).numpy()[:, 0]
        assert sorted(i.tobytes() for i in got) == sorted(i.tobytes() for i in expected)
    assert set(y.tolist()) == set(range(len(sources)))


def test_digits_split_is_stratified_and_seeded(digits, sk_digits):
    counts = np.bincount(sk_digits.target)
    test_counts = np.bincount(digits.y_test.numpy(), minlength=10)
    np.testing.assert_array_equal(test_counts, np.round(counts * 0.25).astype(int))
    np.testing.assert_array_equal(np.bincount(digits.y_train.numpy(), minlength=10), counts - test_counts)
    again, other = load_digits(seed=0), load_digits(seed=1)
    assert torch.equal(again.x_test, digits.x_test) and torch.equal(again.y_train, digits.y_train)
    assert not torch.equal(other.x_test, digits.x_test)
    # train and test are disjoint: no image of the test set reappears in training (digits has a few duplicates,
    # so compare counts rather than demanding an empty intersection)
    train = {img.tobytes() for img in digits.x_train.numpy()}
    assert sum(img.tobytes() in train for img in digits.x_test.numpy()) < 5
    smaller = load_digits(test_fraction=0.5)
    assert abs(len(smaller.x_test) - 1797 / 2) <= 10


def test_digits_resize_and_bad_arguments():
    big = load_digits(classes=2, image_size=16)
    assert big.input_shape == (1, 16, 16)
    assert big.x_train.min() >= 0 and big.x_train.max() <= 1
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.0)
    with pytest.raises(ValueError, match="unknown class"):
        load_digits(classes=[3, 12])
    with pytest.raises(ValueError, match="repeats"):
        load_digits(classes=[3, 3])


# ---------------------------------------------------------------- MNIST IDX


def tiny_mnist():
    rng = np.random.default_rng(0)
    return {  # non-square images so a swapped H/W would show
        MNIST_STEMS[0]: rng.integers(0, 256, (12, 5, 7), dtype=np.uint8),
        MNIST_STEMS[1]: np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], np.uint8),
        MNIST_STEMS[2]: rng.integers(0, 256, (4, 5, 7), dtype=np.uint8),
        MNIST_STEMS[3]: np.array([2, 7, 1, 8], np.uint8),
    }


def write_mnist(folder, arrays, gz):
    for stem, array in arrays.items():
        write_idx(folder / (stem + (".gz" if gz else "")), array)


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize(
    ("layout", "kind"), [("", "mnist"), ("raw", "mnist"), ("MNIST/raw", "mnist"), ("FashionMNIST/raw", "fashion")]
)
def test_mnist_idx_round_trip_in_every_layout(tmp_path, layout, kind, gz):
    arrays = tiny_mnist()
    write_mnist(tmp_path / layout, arrays, gz)
    if gz:
        assert (tmp_path / layout / (MNIST_STEMS[0] + ".gz")).read_bytes()[:2] == b"\x1f\x8b"
    split = load_mnist(tmp_path, kind=kind)
    assert split.input_shape == (1, 5, 7) and split.x_train.dtype == torch.float32
    np.testing.assert_array_equal(as_bytes(split.x_train)[:, 0], arrays[MNIST_STEMS[0]])
    np.testing.assert_array_equal(split.y_train.numpy(), arrays[MNIST_STEMS[1]])
    np.testing.assert_array_equal(as_bytes(split.x_test)[:, 0], arrays[MNIST_STEMS[2]])
    np.testing.assert_array_equal(split.y_test.numpy(), arrays[MNIST_STEMS[3]])
    assert split.name == ("fashion_mnist" if kind == "fashion" else "mnist")
    assert split.classes[0] == ("T-shirt/top" if kind == "fashion" else "0") and split.num_classes == 10


def test_mnist_class_subset_and_caps(tmp_path):
    arrays = tiny_mnist()
    write_mnist(tmp_path, arrays, gz=False)
    split = load_mnist(tmp_path, classes=[5, 1])
    assert split.classes == ("5", "1") and split.source_labels == (5, 1)
    np.testing.assert_array_equal(split.y_train.numpy(), [1, 1, 0, 0, 0])  # file order: 1 1 5 5 5
    np.testing.assert_array_equal(as_bytes(split.x_train)[:, 0], arrays[MNIST_STEMS[0]][[1, 3, 4, 8, 10]])
    assert split.num_classes == 2 and len(split.x_test) == 1 and split.y_test.tolist() == [1]
    capped = load_mnist(tmp_path, classes=[5, 1], max_per_class=1)
    assert capped.y_train.tolist() == [1, 0]  # first 1 (index 1) and first 5 (index 4), file order
    np.testing.assert_array_equal(as_bytes(capped.x_train)[:, 0], arrays[MNIST_STEMS[0]][[1, 4]])
    limited = load_images("mnist", tmp_path, limit=3)
    assert len(limited.x_train) == 3 and len(limited.x_test) == 3
    assert limited.y_train.tolist() == [3, 1, 4]


def corrupt_bad_magic(data):
    return b"\x01\x02" + data[2:]


def corrupt_unknown_type(data):
    return data[:2] + b"\x07" + data[3:]


def corrupt_truncated(data):
    return data[:-10]


def corrupt_trailing(data):
    return data + b"\x00\x00"


@pytest.mark.parametrize("corrupt", [corrupt_bad_magic, corrupt_unknown_type, corrupt_truncated, corrupt_trailing])
def test_corrupt_idx_is_a_value_error_naming_the_file(tmp_path, corrupt):
    write_mnist(tmp_path, tiny_mnist(), gz=False)
    bad = tmp_path / MNIST_STEMS[2]
    bad.write_bytes(corrupt(bad.read_bytes()))
    with pytest.raises(ValueError, match=re.escape(str(bad))) as info:
        load_mnist(tmp_path)
    assert isinstance(info.value, FormatError)


def test_truncated_gzip_and_wrong_contents_are_value_errors(tmp_path):
    write_mnist(tmp_path, tiny_mnist(), gz=True)
    bad = tmp_path / (MNIST_STEMS[0] + ".gz")
    bad.write_bytes(bad.read_bytes()[:-20])
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        load_mnist(tmp_path)
    labels = tmp_path / (MNIST_STEMS[1] + ".gz")
    write_mnist(tmp_path, tiny_mnist(), gz=True)
    write_idx(labels, np.zeros(11, np.uint8))  # one label short of the 12 images
    with pytest.raises(ValueError, match=re.escape(str(labels))):
        load_mnist(tmp_path)
    bad.write_bytes(gzip.compress(b"\x00\x00\x08"))  # valid gzip, IDX header cut short
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(bad)


def test_missing_mnist_names_expected_files_and_place(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(tmp_path / "nowhere")
    message = str(info.value)
    assert isinstance(info.value, DatasetNotFoundError)
    assert all(stem in message for stem in MNIST_STEMS)
    assert str(tmp_path / "nowhere" / "MNIST" / "raw") in message and "never downloads" in message
    with pytest.raises(FileNotFoundError, match="FashionMNIST"):
        load_mnist(tmp_path, kind="fashion")
    partial = tiny_mnist()
    del partial[MNIST_STEMS[3]]
    write_mnist(tmp_path / "raw", partial, gz=False)
    with pytest.raises(FileNotFoundError, match=re.escape(MNIST_STEMS[3])) as info:
        load_mnist(tmp_path)
    assert str(tmp_path / "raw") in str(info.value)


# ---------------------------------------------------------------- CIFAR python pickles


def cifar_images(n, seed):
    images = np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    images[0, 1, 2] = (10, 20, 30)  # row 1, column 2: R, G, B all differ
    return images


@pytest.mark.parametrize("nested", [True, False], ids=["cifar-10-batches-py", "flat"])
def test_cifar10_round_trip_channels_first(tmp_path, nested):
    folder = tmp_path / "cifar-10-batches-py" if nested else tmp_path
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    batches = [(cifar_images(2, i), np.array([i, 9 - i])) for i in range(5)]
    for i, (images, labels) in enumerate(batches, start=1):
        write_cifar_batch(folder / f"data_batch_{i}", images, labels)
    test_images, test_labels = cifar_images(3, 99), np.array([4, 0, 7])
    write_cifar_batch(folder / "test_batch", test_images, test_labels)
    write_cifar_meta(folder / "batches.meta", names)

    split = load_cifar(tmp_path)
    assert split.name == "cifar10" and split.classes == tuple(names) and split.input_shape == (3, 32, 32)
    train_images = np.concatenate([b[0] for b in batches])
    np.testing.assert_array_equal(as_bytes(split.x_train), train_images.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(split.y_train.numpy(), np.concatenate([b[1] for b in batches]))
    np.testing.assert_array_equal(as_bytes(split.x_test), test_images.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(split.y_test.numpy(), test_labels)
    assert as_bytes(split.x_train[0, :, 1, 2]).tolist() == [10, 20, 30]  # channel, then row, then column
    sub = load_images("cifar10", tmp_path, classes=["cat", "airplane"])
    assert sub.classes == ("cat", "airplane") and sub.y_train.tolist() == [1, 0] and sub.y_test.tolist() == [1]


def test_cifar100_reads_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    images, fine, coarse = cifar_images(4, 0), np.array([99, 0, 42, 7]), np.array([19, 0, 3, 1])
    write_cifar_batch(folder / "train", images, fine, fine=True, coarse_labels=coarse)
    write_cifar_batch(folder / "test", images[:2], fine[:2], fine=True)
    write_cifar_meta(folder / "meta", [f"class_{i:02d}" for i in range(100)], fine=True)
    split = load_cifar(tmp_path, num_classes=100)
    assert split.name == "cifar100" and split.num_classes == 100 and split.classes[42] == "class_42"
    assert split.y_train.tolist() == [99, 0, 42, 7] and split.y_test.tolist() == [99, 0]
    np.testing.assert_array_equal(as_bytes(split.x_train), images.transpose(0, 3, 1, 2))
    assert as_bytes(split.x_train[0, :, 1, 2]).tolist() == [10, 20, 30]
    assert load_cifar(tmp_path, num_classes=100, classes=3).y_train.tolist() == [0]


def test_cifar_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_cifar(tmp_path)
    message = str(info.value)
    for name in ("data_batch_1", "data_batch_5", "test_batch", "batches.meta", "cifar-10-batches-py"):
        assert name in message
    assert "never downloads" in message
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        load_cifar(tmp_path, num_classes=100)

    folder = tmp_path / "cifar-10-batches-py"
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}", cifar_images(1, i), [i])
    write_cifar_batch(folder / "test_batch", cifar_images(1, 0), [0])
    write_cifar_meta(folder / "batches.meta", [str(i) for i in range(10)])
    bad = folder / "data_batch_3"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        load_cifar(tmp_path)
    bad.write_bytes(pickle.dumps({"data": np.zeros((1, 100), np.uint8), "labels": [0]}))
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        load_cifar(tmp_path)


# ---------------------------------------------------------------- ImageFolder trees


def orientation_features(x: torch.Tensor) -> torch.Tensor:
    """Normalised structure tensor (gx², gy², gx·gy) per image: which way the stripes run."""
    g = x.mean(1)
    gx, gy = (g[:, :-1, 1:] - g[:, :-1, :-1]), (g[:, 1:, :-1] - g[:, :-1, :-1])
    f = torch.stack([(gx * gx).mean((1, 2)), (gy * gy).mean((1, 2)), (gx * gy).mean((1, 2))], 1)
    return f / f[:, :2].sum(1, keepdim=True)


def test_synthetic_folder_round_trips_with_distinguishable_classes(tmp_path):
    root = make_synthetic_image_folder(tmp_path / "synth", classes=4, per_class=6, size=12, seed=3)
    names = sorted(p.name for p in (root / "train").iterdir())
    assert len(names) == 4 and sorted(p.name for p in (root / "val").iterdir()) == names
    split = load_image_folder(root)
    assert split.classes == tuple(names) and split.name == "synth"
    assert split.input_shape == (3, 12, 12) and len(split.x_train) == 24 and len(split.x_test) == 24
    assert np.bincount(split.y_train.numpy()).tolist() == [6] * 4
    assert split.x_train.min() >= 0 and split.x_train.max() <= 1 and split.x_train.std() > 0.1
    # a nearest-centroid classifier on stripe orientation separates the classes
    train_f, test_f = orientation_features(split.x_train), orientation_features(split.x_test)
    centroids = torch.stack([train_f[split.y_train == c].mean(0) for c in range(4)])
    assert (torch.cdist(test_f, centroids).argmin(1) == split.y_test).float().mean() >= 0.9
    again = make_synthetic_image_folder(tmp_path / "again", classes=4, per_class=6, size=12, seed=3)
    assert torch.equal(load_image_folder(again).x_train, split.x_train)


def test_image_folder_options(tmp_path):
    root = make_synthetic_image_folder(tmp_path / "tree", classes=3, per_class=4, size=10, split=False)
    assert not (root / "train").exists()
    split = load_image_folder(root, seed=1)  # one tree: split per class by seed
    assert np.bincount(split.y_test.numpy()).tolist() == [1, 1, 1] and len(split.x_train) == 9
    assert not torch.equal(load_image_folder(root, seed=2).x_test, split.x_test)
    small = load_image_folder(root, image_size=6, grayscale=True, max_per_class=2, classes=[2, 0])
    assert small.input_shape == (1, 6, 6) and small.classes == (split.classes[2], split.classes[0])
    assert len(small.x_train) + len(small.x_test) == 4
    assert len(load_images("image_folder", root, limit=5).x_train) == 5

    folder = root / split.classes[0]
    from PIL import Image

    Image.new("RGB", (11, 10)).save(folder / "odd.png")
    with pytest.raises(ValueError, match="odd.png"):
        read_images(sorted(folder.glob("*.png")))
    (folder / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="broken.png"):
        load_image_folder(root, image_size=10)


def test_missing_image_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="ImageFolder") as info:
        load_image_folder(tmp_path / "absent")
    assert "never downloads" in str(info.value)
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        load_image_folder(tmp_path / "empty")
