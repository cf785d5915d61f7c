"""Images as the latents of a VAE, encoded once and kept in a folder: how U-ViT trains on ImageNet at 256 × 256.

The U-ViT reference encodes every training image and its mirror image with Stable Diffusion's autoencoder once
(``scripts/extract_imagenet_feature.py``), keeps the *moments* of each (the encoder's mean and log-variance), and
at every training step draws a latent from them, z = s (μ + σ ε), with s the autoencoder's scaling factor
(0.18215). Here the autoencoder is diffusers' ``AutoencoderKL`` read from a local folder (its ``config.json`` and
weights, e.g. ``stabilityai/sd-vae-ft-mse`` saved by ``save_pretrained``); nothing is downloaded.

``python -m lab latents IMAGE_FOLDER --vae VAE --out DIR`` (:func:`encode_image_folder`) writes DIR:

- ``latents.json``: the VAE's folder and scaling factor, the image size, the classes, and per split the files and
  their labels;
- ``train/<i>.npy`` and ``test/<i>.npy``: ``[2, 2 C, h, w]`` float32, the moments of image i and of its mirror.

Encoding skips the files already there, so an interrupted run picks up where it stopped, and under ``torchrun``
each process encodes every ``WORLD_SIZE``-th image. ``data.name=latent_folder``, ``data.root=DIR`` then trains on
it (:class:`LatentDataset`): a training sample is a latent drawn from the moments of the image or its mirror (one
of the two at random, as the reference's data set holds both), seeded by its ``(epoch, index)`` key like every
augmentation of the lab, so a resumed run draws the same; held-out samples are the unmirrored mean, s μ. A model's
samples go back to pixels through the same VAE (:func:`decoder`).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from lab.data.readers import DatasetNotFoundError, image_folder_files
from lab.runfolder.layout import LATENTS_INDEX
from lab.runfolder.writes import atomic_path
from lab.seeds import sample_seed

__all__ = ["LATENT_FOLDER", "LatentDataset", "VAENotFoundError", "decoder", "encode_image_folder", "load_vae",
           "read_latent_folder"]

LATENT_FOLDER = "latent_folder"  # data.name of a folder written by encode_image_folder
SPLITS = ("train", "test")


class VAENotFoundError(FileNotFoundError):
    """The VAE's folder is missing or is not a diffusers ``AutoencoderKL``; the message says what is expected."""


def load_vae(path: str | Path, device: torch.device | str = "cpu"):
    """diffusers' ``AutoencoderKL`` from a local folder, frozen, in evaluation mode.

    Raises:
        VAENotFoundError: the folder or its ``config.json`` is missing, or the weights cannot be read.
    """
    from diffusers import AutoencoderKL

    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise VAENotFoundError(f"no VAE at {folder}: expected a folder holding an AutoencoderKL's config.json and its "
                               "weights (diffusion_pytorch_model.safetensors), as diffusers' save_pretrained writes "
                               "them, e.g. a local copy of stabilityai/sd-vae-ft-mse")
    try:
        vae = AutoencoderKL.from_pretrained(folder, local_files_only=True, low_cpu_mem_usage=False)
    except (OSError, ValueError) as err:
        raise VAENotFoundError(f"the VAE at {folder} cannot be read: {err}") from None
    return vae.requires_grad_(False).eval().to(device)


def image_transform(size: int) -> Callable[[Image.Image], torch.Tensor]:
    """The reference's ImageNet preprocessing: the shorter side resized to ``size``, the centre ``size × size``
    cropped, pixels mapped to [−1, 1] (what the autoencoder was trained on)."""
    from torchvision.transforms import v2

    return v2.Compose([v2.PILToTensor(), v2.Resize(size, antialias=True), v2.CenterCrop(size),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)])


def _world() -> tuple[int, int]:
    """``(rank, world size)`` of a ``torchrun`` launch, ``(0, 1)`` otherwise."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


@torch.no_grad()
def encode_image_folder(root: str | Path, vae: str | Path, out: str | Path, *, image_size: int = 256,
                        classes: int = 0, max_per_class: int = 0, train_fraction: float = 0.8, seed: int = 0,
                        batch_size: int = 32, device: torch.device | str = "cpu", progress: bool = True,
                        wait_s: float = 3600.0) -> Path:
    """Encode an image folder (``root/<class>/*`` or ``root/train|val/<class>/*``) into a latent folder ``out``.

    Args:
        root: the image folder (:func:`lab.data.readers.image_folder_files`).
        vae: the VAE's folder (:func:`load_vae`).
        out: the latent folder; files already there are kept.
        image_size: side of the centre crop (256 for the reference's ImageNet models: 32 × 32 latents).
        classes: keep the first N classes (0 = all).
        max_per_class: at most N images per class (0 = all).
        train_fraction: share kept for training, for a tree without train/val folders.
        seed: seeds that split.
        batch_size: images encoded at once.
        device: where the VAE runs.
        progress: show a progress bar.
        wait_s: under ``torchrun``, how long rank 0 waits for the other ranks' files.

    Returns:
        ``out``, with ``latents.json`` written once every file is there.

    Raises:
        VAENotFoundError, DatasetNotFoundError: before anything is encoded.
    """
    model = load_vae(vae, device)
    train, test, names = image_folder_files(root, classes=classes or None, max_per_class=max_per_class or None,
                                            test_fraction=1.0 - train_fraction, seed=seed)
    out = Path(out)
    splits = {"train": train, "test": test}
    rank, world = _world()
    work = [(split, i, path) for split, samples in splits.items() for i, (path, _) in enumerate(samples)
            if i % world == rank and not (out / split / f"{i}.npy").is_file()]
    for split in SPLITS:
        (out / split).mkdir(parents=True, exist_ok=True)
    transform = image_transform(image_size)
    with tqdm(total=len(work), desc="encoding", unit="img", disable=not progress or rank != 0,
              dynamic_ncols=True) as bar:
        for start in range(0, len(work), batch_size):
            chunk = work[start:start + batch_size]
            images = []
            for _, _, path in chunk:
                with Image.open(path) as im:
                    images.append(transform(im.convert("RGB")))
            x = torch.stack(images).to(device)
            moments = model.encode(torch.cat([x, x.flip(-1)])).latent_dist.parameters.float().cpu()
            both = torch.stack([moments[:len(x)], moments[len(x):]], dim=1).numpy()  # [B, 2, 2C, h, w]
            for (split, i, _), m in zip(chunk, both, strict=True):
                with atomic_path(out / split / f"{i}.npy") as f:  # whole or absent: an interrupted encode resumes
                    np.save(f, m)
            bar.update(len(chunk))
    if rank != 0:
        return out
    deadline = time.monotonic() + wait_s
    while any(not (out / s / f"{i}.npy").is_file() for s, samples in splits.items() for i in range(len(samples))):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other processes did not encode their share of {root} into {out} in {wait_s} s")
        time.sleep(1.0)
    first = np.load(out / "train" / "0.npy") if train else np.load(out / "test" / "0.npy")
    index = {"vae": str(Path(vae).expanduser().resolve()), "scaling_factor": float(model.config.scaling_factor),
             "image_size": image_size, "source": str(Path(root).resolve()), "classes": list(names),
             "latent_shape": [first.shape[1] // 2, *first.shape[2:]],
             **{s: [[str(p), int(y)] for p, y in samples] for s, samples in splits.items()}}
    (out / LATENTS_INDEX).write_text(json.dumps(index, indent=1))
    return out


def read_latent_folder(root: str | Path) -> dict[str, Any]:
    """The index of a latent folder (``latents.json``), its VAE checked to be there (the samples are decoded with
    it).

    Raises:
        DatasetNotFoundError: no ``latents.json`` under ``root``.
        VAENotFoundError: the VAE it was encoded with is not at its folder any more.
    """
    path = Path(root).expanduser() / LATENTS_INDEX
    if not path.is_file():
        raise DatasetNotFoundError(f"no latent folder at {root}: expected {LATENTS_INDEX} and train/, test/ as "
                                   "`python -m lab latents IMAGE_FOLDER --vae VAE --out DIR` writes them")
    index = json.loads(path.read_text())
    if not (Path(index["vae"]) / "config.json").is_file():
        raise VAENotFoundError(f"{root} was encoded with the VAE at {index['vae']}, which is not there: its samples "
                               "are decoded with it (put it back, or encode the images again with another VAE)")
    return index


class LatentDataset(Dataset):
    """One split of a latent folder, indexed like the lab's keyed datasets (:mod:`lab.data.keyed`).

    Args:
        root: the latent folder.
        index: its index (:func:`read_latent_folder`): the split's labels and the VAE's scaling factor s.
        split: ``train`` or ``test``.
        sample: draw z = s (μ + σ ε) from the image or its mirror, seeded by the key (training); else s μ of the
            image itself.
        seed: seeds each sample's draw with its key.
    """

    def __init__(self, root: str | Path, index: dict[str, Any], split: str, *, sample: bool, seed: int = 0) -> None:
        self.folder, self.labels = Path(root) / split, [int(y) for _, y in index[split]]
        self.scaling_factor, self.sample, self.seed = float(index["scaling_factor"]), sample, seed

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int] | int) -> tuple[torch.Tensor, int]:
        key = (0, key) if isinstance(key, int) else key
        moments = torch.from_numpy(np.load(self.folder / f"{key[1]}.npy"))  # [2, 2C, h, w]
        if not self.sample:
            mean = moments[0].chunk(2)[0]
            return self.scaling_factor * mean, self.labels[key[1]]
        g = torch.Generator().manual_seed(sample_seed(self.seed, *key))
        flip = int(torch.randint(2, (), generator=g))
        mean, logvar = moments[flip].chunk(2)
        std = torch.exp(0.5 * logvar.clamp(-30.0, 20.0))  # diffusers' and the reference's clamp
        return self.scaling_factor * (mean + std * torch.randn(mean.shape, generator=g)), self.labels[key[1]]


@functools.lru_cache(maxsize=2)
def _vae_on(path: str, device: str):
    return load_vae(path, device)


def decoder(index: dict[str, Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """z ``[B, C, h, w]`` (a model's samples, scaled by s) → images ``[B, 3, H, W]`` in [−1, 1], through the VAE the
    latent folder of ``index`` (:func:`read_latent_folder`) was encoded with (loaded once per process and device)."""

    @torch.no_grad()
    def decode(z: torch.Tensor) -> torch.Tensor:
        vae = _vae_on(index["vae"], str(z.device))
        return vae.decode(z.float() / index["scaling_factor"]).sample.clamp(-1.0, 1.0)

    return decode
