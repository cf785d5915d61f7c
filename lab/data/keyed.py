"""Image data read batch by batch, for the loader engine: ImageFolder trees too large for memory, and in-memory
sets seen through the same interface.

Every training sample is addressed by a key ``(epoch, index)`` that a :class:`KeyedSampler` hands out, and its
random augmentation is drawn from a generator seeded by ``(seed, epoch, index)``. So the images a step sees are a
pure function of the seed and the step — whichever loader worker decodes them, however many workers there are,
and whether or not the run was stopped and resumed in between: a resumed run continues with the very batch (and
crops) it would have seen.

Pixels of image folders are normalised with the ImageNet mean and std (as MAE and timm do); in-memory sets come
standardised already (:func:`lab.train.build.build_data`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import Dataset, Sampler

from lab.seeds import epoch_seed, sample_seed

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "FileDataset", "KeyedSampler", "ShardSampler", "TensorDataset",
           "eval_transform", "train_transform", "NORMALIZATIONS"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_PCT = 0.875  # evaluation: resize the shorter side to size / 0.875, then centre-crop (timm's and MAE's rule)

Key = tuple[int, int]  # (epoch, index)


def _augmentations(size: int, augment: str) -> list[Callable]:
    from torchvision.transforms import v2  # imported here: torchvision takes seconds to import

    if augment == "mae":  # MAE pretraining: random resized crop (scale 0.2-1) and flip
        return [v2.RandomResizedCrop(size, scale=(0.2, 1.0), interpolation=v2.InterpolationMode.BICUBIC,
                                     antialias=True), v2.RandomHorizontalFlip()]
    if augment == "resized_crop":  # ImageNet classification (timm's default): scale 0.08-1 and flip
        return [v2.RandomResizedCrop(size, scale=(0.08, 1.0), interpolation=v2.InterpolationMode.BILINEAR,
                                     antialias=True), v2.RandomHorizontalFlip()]
    if augment == "crop_flip":  # CIFAR's padded random crop and flip
        return [v2.Resize(size, antialias=True), v2.CenterCrop(size), v2.RandomCrop(size, padding=size // 8),
                v2.RandomHorizontalFlip()]
    if augment == "flip":  # diffusion on CIFAR (U-ViT): random horizontal flips only
        return [v2.Resize(size, antialias=True), v2.CenterCrop(size), v2.RandomHorizontalFlip()]
    if augment == "none":
        return [v2.Resize(size, antialias=True), v2.CenterCrop(size)]
    if augment == "timm":
        raise ValueError("data.augment=timm is timm's transform of image files (PIL images): it applies to "
                         "data.name=image_folder, not to sets held in memory")
    raise ValueError(f"unknown augmentation {augment!r}; valid: flip, mae, resized_crop, crop_flip, timm, none")


NORMALIZATIONS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD), "symmetric": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))}
"""How pixels in [0, 1] become a model's inputs, x = (pixels − mean) / std: ImageNet's statistics, or ``symmetric``:
pixels in [−1, 1], as the U-ViT reference and most diffusion models take them."""


def _normalise(normalize: str = "imagenet") -> list[Callable]:
    from torchvision.transforms import v2  # imported here: torchvision takes seconds to import

    return [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(*NORMALIZATIONS[normalize])]


def train_transform(size: int, augment: str, normalize: str = "imagenet") -> Callable[[Image.Image], torch.Tensor]:
    """PIL image → ``[3, size, size]`` float tensor, augmented (``flip``, ``mae``, ``resized_crop``, ``crop_flip``,
    ``timm`` or ``none``), normalised (:data:`NORMALIZATIONS`).

    ``timm`` is timm's own training transform with the defaults of its training script
    (``timm.data.create_transform``: random resized crop 0.08–1 with a random choice of bilinear or bicubic
    interpolation, flip, colour jitter 0.4), what *ResidualDroppath: Enhancing Feature Reuse over Residual
    Connections* trains with where it leaves a setting unsaid.
    """
    if augment == "timm":
        from timm.data import create_transform  # imported here: timm takes seconds to import

        mean, std = NORMALIZATIONS[normalize]
        return create_transform(size, is_training=True, color_jitter=0.4, interpolation="random", mean=mean, std=std)
    from torchvision.transforms import v2

    return v2.Compose([v2.ToImage(), *_augmentations(size, augment), *_normalise(normalize)[1:]])


def eval_transform(size: int, normalize: str = "imagenet") -> Callable[[Image.Image], torch.Tensor]:
    """PIL image → ``[3, size, size]``, no randomness: the shorter side resized to ``size / 0.875`` and centre-
    cropped for ImageNet-scale images (size ≥ 128); small images are resized to ``size`` and not cropped."""
    from torchvision.transforms import v2

    resize = math.floor(size / CROP_PCT) if size >= 128 else size
    return v2.Compose([v2.ToImage(), v2.Resize(resize, interpolation=v2.InterpolationMode.BICUBIC, antialias=True),
                       v2.CenterCrop(size), *_normalise(normalize)[1:]])


def tensor_transform(size: int, augment: str) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The augmentation of an in-memory image ``[C, H, W]`` (already standardised), or None for ``none``."""
    if augment == "none":
        return None
    from torchvision.transforms import v2

    return v2.Compose(_augmentations(size, augment))


class _Keyed(Dataset):
    """A dataset indexed by ``(epoch, index)`` keys whose augmentation is seeded by the key."""

    def __init__(self, transform: Callable | None, seed: int) -> None:
        self.transform, self.seed = transform, seed

    def _load(self, index: int) -> tuple[object, int]:
        raise NotImplementedError

    def __getitem__(self, key: Key | int) -> tuple[torch.Tensor, int]:
        key = (0, key) if isinstance(key, int) else key
        image, label = self._load(key[1])
        if self.transform is not None:
            state = random.getstate()  # timm's transforms draw from Python's random module, torchvision's from torch
            with torch.random.fork_rng(devices=[]):  # the caller's generators (the main process, workers=0) are kept
                torch.manual_seed(sample_seed(self.seed, *key))
                random.seed(sample_seed(self.seed, *key))
                image = self.transform(image)
            random.setstate(state)
        return image, label


class FileDataset(_Keyed):
    """Images decoded from files on demand.

    Args:
        samples: ``(path, label)`` pairs (:func:`lab.data.readers.image_folder_files`).
        transform: PIL image → tensor (:func:`train_transform` or :func:`eval_transform`).
        seed: seeds each sample's augmentation with its key.
    """

    def __init__(self, samples: Sequence[tuple[Path, int]], transform: Callable, seed: int = 0) -> None:
        super().__init__(transform, seed)
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def _load(self, index: int) -> tuple[Image.Image, int]:
        path, label = self.samples[index]
        with Image.open(path) as im:
            return im.convert("RGB"), label


class TensorDataset(_Keyed):
    """Samples of whole tensors ``x [n, …]``, ``y [n]``, optionally augmented per key (images ``[C, H, W]``)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform: Callable | None = None, seed: int = 0) -> None:
        super().__init__(transform, seed)
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def _load(self, index: int) -> tuple[torch.Tensor, int]:
        return self.x[index], int(self.y[index])


class KeyedSampler(Sampler[Key]):
    """One process's share of a seeded shuffle of the training set, as ``(epoch, index)`` keys.

    Epoch e's order is a permutation seeded by ``(seed, e)``; process r of w takes every w-th index from r, cut to
    the same whole number of batches on every process (data-parallel processes must take the same number of
    steps; the remainder is dropped, as ``drop_last`` would). :meth:`set_epoch` also takes the batch to start from,
    so a run resumed mid-epoch continues where it stopped.

    Args:
        n: training-set size.
        batch_size: the per-process micro-batch.
        rank: this process.
        world: number of processes.
        seed: shuffle seed.
    """

    def __init__(self, n: int, batch_size: int, rank: int = 0, world: int = 1, seed: int = 0) -> None:
        self.n, self.batch_size, self.rank, self.world, self.seed = n, batch_size, rank, world, seed
        self.batches = (n // world) // batch_size
        if self.batches == 0:
            raise ValueError(f"{n} training samples are fewer than one batch of {batch_size} on each of {world} "
                             "processes: lower train.batch_size")
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start = epoch, start_batch

    def __len__(self) -> int:
        return (self.batches - self.start) * self.batch_size

    def __iter__(self) -> Iterator[Key]:
        g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        mine = torch.randperm(self.n, generator=g)[self.rank::self.world][:self.batches * self.batch_size]
        for i in mine[self.start * self.batch_size:].tolist():
            yield self.epoch, i


class ShardSampler(Sampler[int]):
    """Process r of w evaluates indices r, r + w, …: every sample exactly once over all processes, in order."""

    def __init__(self, n: int, rank: int = 0, world: int = 1) -> None:
        self.indices = range(rank, n, world)

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)
