"""Images read batch by batch: keyed augmentation, process shards, the same files and split as the in-memory reader."""

import pytest
import torch
from torch.utils.data import DataLoader

from lab.data.formats import make_synthetic_image_folder
from lab.data.keyed import FileDataset, KeyedSampler, ShardSampler, eval_transform, train_transform
from lab.data.readers import DatasetNotFoundError, image_folder_files, load_image_folder


@pytest.fixture
def folder(tmp_path):
    return make_synthetic_image_folder(tmp_path / "imgs", classes=3, per_class=6, size=20, split=False)


def test_files_and_split_are_those_of_the_in_memory_reader(folder):
    train, test, names = image_folder_files(folder, test_fraction=0.5, seed=3)
    split = load_image_folder(folder, image_size=20, test_fraction=0.5, seed=3)
    assert names == split.classes and len(names) == 3
    assert [label for _, label in train] == split.y_train.tolist()
    assert [label for _, label in test] == split.y_test.tolist()
    assert not {p for p, _ in train} & {p for p, _ in test}


def test_missing_and_empty_folders_say_where_they_looked(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no images found"):
        image_folder_files(tmp_path / "nowhere")
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match="no images found"):
        image_folder_files(tmp_path / "empty")


def test_a_key_gives_the_same_crop_in_any_worker_and_another_key_another(folder):
    train, _, _ = image_folder_files(folder, test_fraction=0.5)
    data = FileDataset(train, train_transform(16, "mae"), seed=0)
    a, label = data[(2, 1)]
    assert a.shape == (3, 16, 16) and label == train[1][1]
    torch.manual_seed(123)  # the caller's random state plays no part, and is left as it was
    state = torch.get_rng_state()
    assert torch.equal(data[(2, 1)][0], a)
    assert torch.equal(torch.get_rng_state(), state)
    assert not torch.equal(data[(3, 1)][0], a)  # the next epoch crops the image anew
    loader = DataLoader(torch.utils.data.Subset(data, [(2, 1)]), batch_size=1, num_workers=1)
    assert torch.equal(next(iter(loader))[0][0], a)  # a worker process draws the same crop


def test_eval_transform_is_deterministic_and_normalised(folder):
    train, _, _ = image_folder_files(folder, test_fraction=0.5)
    data = FileDataset(train, eval_transform(16))
    x = torch.stack([data[i][0] for i in range(len(data))])
    assert torch.equal(x, torch.stack([data[i][0] for i in range(len(data))]))
    assert x.shape[1:] == (3, 16, 16) and x.min() < 0 < x.max()  # ImageNet mean/std: centred near zero


@pytest.mark.parametrize("world", [1, 2, 3])
def test_keyed_sampler_shards_an_epoch_into_equal_disjoint_whole_batches(world):
    samplers = [KeyedSampler(50, 4, rank, world, seed=1) for rank in range(world)]
    for s in samplers:
        s.set_epoch(5)
    keys = [list(s) for s in samplers]
    assert len({len(k) for k in keys}) == 1 and len(keys[0]) % 4 == 0  # the same number of steps everywhere
    indices = [i for k in keys for _, i in k]
    assert len(indices) == len(set(indices)) and all(e == 5 for k in keys for e, _ in k)
    assert len(indices) > 50 - world * 4  # only a remainder smaller than a batch per process is dropped
    samplers[0].set_epoch(6)
    assert [i for _, i in samplers[0]] != [i for _, i in keys[0]]  # each epoch its own order


def test_keyed_sampler_resumes_mid_epoch_on_the_same_keys():
    whole = KeyedSampler(40, 4, seed=2)
    whole.set_epoch(1)
    resumed = KeyedSampler(40, 4, seed=2)
    resumed.set_epoch(1, start_batch=3)
    assert list(resumed) == list(whole)[12:] and len(resumed) == len(list(whole)) - 12


def test_keyed_sampler_refuses_a_batch_larger_than_a_share():
    with pytest.raises(ValueError, match="fewer than one batch"):
        KeyedSampler(10, 8, world=2)


def test_shard_sampler_covers_every_sample_once():
    shards = [list(ShardSampler(11, r, 3)) for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(11))


def test_timm_augmentation_is_timms_training_transform_keyed_like_the_others(folder):
    import random

    from timm.data.transforms import RandomResizedCropAndInterpolation
    from torchvision.transforms import ColorJitter

    transform = train_transform(16, "timm")
    crop, jitter = transform.transforms[0], transform.transforms[2]
    assert isinstance(crop, RandomResizedCropAndInterpolation) and crop.scale == (0.08, 1.0)
    assert len(crop.interpolation) == 2  # "random": bilinear or bicubic, drawn per image
    assert isinstance(jitter, ColorJitter) and jitter.brightness == (0.6, 1.4) and jitter.saturation == (0.6, 1.4)
    train, _, _ = image_folder_files(folder, test_fraction=0.5)
    data = FileDataset(train, transform, seed=3)
    random.seed(123)
    before = random.random()
    random.seed(123)
    first = data[(2, 1)][0]
    assert random.random() == before  # the caller's Python generator is left as it was
    torch.testing.assert_close(data[(2, 1)][0], first, rtol=0, atol=0)  # timm draws from Python's random: seeded
    assert not torch.equal(data[(3, 1)][0], first) and first.shape == (3, 16, 16)
    with pytest.raises(ValueError, match="data.augment=timm"):
        from lab.data.keyed import tensor_transform

        tensor_transform(16, "timm")


def test_flip_augmentation_only_mirrors_some_images():
    from lab.data.keyed import tensor_transform

    flip = tensor_transform(8, "flip")
    images = torch.randn(64, 1, 8, 8)
    out = torch.stack([flip(x) for x in images])
    same = (out == images).flatten(1).all(1)
    mirrored = (out == images.flip(-1)).flatten(1).all(1)
    assert (same | mirrored).all() and same.any() and mirrored.any()
