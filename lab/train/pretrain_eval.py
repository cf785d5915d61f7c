"""What a generative pretraining run measures while it trains: for an MAE the rank of its bottleneck features, a
quick linear probe and a reconstruction picture — so Figure 6 (rank and probe accuracy over training, across α_min)
and Figure 8 (reconstructions) of *Residual Connections Harm Generative Representation Learning* come from the run
folders —, for a diffusion model a grid of samples and linear probes over (noise level, block).

Pure functions of a model and tensors; the loader engine calls them on rank 0 at each evaluation.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lab.analysis.probing import linear_probe
from lab.analysis.rank import feature_rank
from lab.hooks import eval_mode
from lab.runfolder.writes import atomic_path, atomic_write_bytes


@torch.no_grad()
def features(model: nn.Module, dataset: Dataset, *, limit: int | None = None, batch_size: int = 256,
             device: torch.device | str = "cpu", workers: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``forward_features`` of ``limit`` samples of ``dataset`` (all by default) in eval mode.

    The samples are taken in one fixed shuffled order (seed 0), so a limit keeps every class in proportion — an
    image folder lists its files class by class — and a smaller limit is a prefix of a larger one.

    Returns:
        ``(features [n, D] float32 on the CPU, labels [n])``, in that order.
    """
    n = len(dataset) if limit is None else min(limit, len(dataset))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:n]
    subset = torch.utils.data.Subset(dataset, order.tolist())
    loader = DataLoader(subset, batch_size=batch_size, num_workers=workers, shuffle=False)
    feats, labels = [], []
    with eval_mode(model):
        for x, y in loader:
            feats.append(model.forward_features(x.to(device)).float().cpu())
            labels.append(torch.as_tensor(y))
    return torch.cat(feats), torch.cat(labels)


def bottleneck_rank(feats: torch.Tensor) -> dict[str, float]:
    """The two rank measures of the bottleneck features ``[n, D]`` (sample-by-sample covariance, §6).

    Returns:
        ``rank_effective``: exp of the spectral entropy (Roy & Vetterli); ``rank_entropy``: the entropy itself, the
        number the paper plots as "effective rank" (its Eq. 6).
    """
    return {"rank_effective": float(feature_rank(feats, measure="effective_rank")),
            "rank_entropy": float(feature_rank(feats, measure="entropy"))}


def quick_probe(train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor],
                num_classes: int, *, epochs: int = 30, seed: int = 0) -> dict[str, float]:
    """A linear probe on cached features (:func:`lab.analysis.probing.linear_probe`): a cheap proxy of
    ``lab probe``'s accuracy to follow during pretraining, not its replacement.

    Returns:
        ``probe_top1`` on the test features.
    """
    out = linear_probe(*train, *test, epochs=epochs, num_classes=num_classes, seed=seed)
    return {"probe_top1": float(out["test_acc"])}


@torch.no_grad()
def save_reconstruction(model: nn.Module, images: torch.Tensor, path: Path, *, seed: int = 0) -> Path:
    """Figure 8's picture for ``images [n, C, H, W]``: rows of originals, masked inputs and reconstructions
    (:meth:`~lab.nn.mae.MaskedAutoencoderViT.reconstruct`: visible patches pasted back), each image scaled to
    [0, 1] on its own. The masks come from ``seed``, so the pictures of successive evaluations are comparable.
    """
    from torchvision.utils import save_image

    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model):
        pasted, mask = model.reconstruct(images, generator=generator, return_mask=True)
    visible = model.unpatchify(model.patchify(images) * (1 - mask[..., None]))
    grid = torch.cat([images, visible, pasted]).float().cpu()
    with atomic_path(path) as f:  # never through a link planted for figures/, never seen half-written
        save_image(grid, f, format="png", nrow=len(images), normalize=True, scale_each=True, padding=1)
    return path


def grid_png(images: torch.Tensor) -> bytes:
    """PNG bytes of a square-ish grid of ``images [n, C, H, W]``, their 1st–99th percentile of values mapped to
    [0, 1] and clamped (as the U-ViT reference clamps its samples to the pixel range): a few stray pixels of an
    undertrained model do not grey out the whole grid."""
    from torchvision.utils import save_image

    images = images.float().cpu()
    lo, hi = torch.quantile(images.flatten()[:1_000_000], torch.tensor([0.01, 0.99])).tolist()
    scaled = ((images - lo) / max(hi - lo, 1e-12)).clamp(0.0, 1.0)
    buffer = io.BytesIO()
    save_image(scaled, buffer, format="png", nrow=math.ceil(math.sqrt(len(images))), padding=1)
    return buffer.getvalue()


@torch.no_grad()
def draw(model: nn.Module, num: int, *, steps: int, sampler: str = "ode", seed: int = 0,
         device: torch.device | str = "cpu", batch_size: int = 500) -> torch.Tensor:
    """``num`` samples ``[num, C, H, W]`` of a diffusion model (``sampler``, ``steps`` steps) from the noise of
    ``seed``, in batches of at most ``batch_size``, in eval mode: the same noise at every evaluation, so successive
    draws show the same samples improving."""
    generator = torch.Generator(device=device).manual_seed(seed)
    with eval_mode(model):
        return torch.cat([model.sample(min(batch_size, num - k), steps=steps, sampler=sampler, generator=generator,
                                       device=device) for k in range(0, num, batch_size)])


@torch.no_grad()
def save_samples(model: nn.Module, path: Path, *, num: int, steps: int, sampler: str = "ode", seed: int = 0,
                 device: torch.device | str = "cpu", decode: Callable[[torch.Tensor], torch.Tensor] | None = None
                 ) -> Path:
    """A grid of ``num`` samples (:func:`draw`) written as a PNG to ``path``. ``decode`` turns samples of latents
    into images (:attr:`lab.train.loader.LoaderData.decode`)."""
    images = draw(model, num, steps=steps, sampler=sampler, seed=seed, device=device)
    if decode is not None:
        images = decode(images)
    atomic_write_bytes(path, grid_png(images))
    return path


PROBE_TIMES = (0.02, 0.05, 0.1, 0.2, 0.3)
"""Noise levels t of the VP-SDE at which a diffusion model's features are probed (ᾱ(t) from 0.99 to 0.45: the
clean end of the process, where such probes find their best layers)."""


@torch.no_grad()
def diffusion_features(model: nn.Module, dataset: Dataset, times: tuple[float, ...] = PROBE_TIMES, *,
                       limit: int | None = None, batch_size: int = 256, seed: int = 0,
                       device: torch.device | str = "cpu", workers: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The token mean of every block's output of a diffusion model on noised images, at each noise level.

    Each image x₀ of ``limit`` samples (the fixed shuffled order of :func:`features`) is noised to
    x_t = √ᾱ(t) x₀ + √(1 − ᾱ(t)) ε with one ε per image (seeded by ``seed``) for every t, and passed through the
    network at t, unconditionally (a class-conditional model gets its null class: the labels the probe predicts
    must not be its input).

    Returns:
        ``(features [len(times), L, n, D] float32 on the CPU, labels [n])`` for the L blocks.

    Raises:
        ValueError: a class-conditional model without a null class (trained without label dropout).
    """
    net = model.net
    if net.num_classes and net.null_class is None:
        raise ValueError("probing a class-conditional model needs its null class (train it with model.p_uncond > 0): "
                         "its features must not be given the labels they are probed for")
    n = len(dataset) if limit is None else min(limit, len(dataset))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:n]
    loader = DataLoader(torch.utils.data.Subset(dataset, order.tolist()), batch_size=batch_size,
                        num_workers=workers, shuffle=False)
    generator = torch.Generator(device=device).manual_seed(seed)
    feats: list[list[torch.Tensor]] = [[] for _ in times]
    labels = []
    with eval_mode(model):
        for x, y in loader:
            x = x.to(device)
            noise = torch.randn(x.shape, device=device, dtype=x.dtype, generator=generator)
            null = torch.full((len(x),), net.null_class, device=device) if net.num_classes else None
            for i, t in enumerate(times):
                tt = torch.full((len(x),), float(t), device=device)
                states = model.forward_intermediates(model.process.perturb(x, tt, noise), tt, null,
                                                     intermediates_only=True)
                feats[i].append(torch.stack([h.mean(dim=1) for h in states[1:]]).float().cpu())  # [L, B, D]
            labels.append(torch.as_tensor(y))
    return torch.stack([torch.cat(f, dim=1) for f in feats]), torch.cat(labels)


def probe_grid(train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor], num_classes: int,
               *, epochs: int = 30, seed: int = 0, **probe_kwargs) -> torch.Tensor:
    """Test accuracy ``[T, L]`` of a linear probe (:func:`lab.analysis.probing.linear_probe`) on each (noise level,
    block) of :func:`diffusion_features`' ``[T, L, n, D]`` training and test features."""
    (xtr, ytr), (xte, yte) = train, test
    grid = torch.zeros(xtr.shape[:2])
    for i in range(xtr.shape[0]):
        for j in range(xtr.shape[1]):
            out = linear_probe(xtr[i, j], ytr, xte[i, j], yte, epochs=epochs, num_classes=num_classes, seed=seed,
                               **probe_kwargs)
            grid[i, j] = float(out["test_acc"])
    return grid


def best_cell(grid: torch.Tensor, times: tuple[float, ...] = PROBE_TIMES) -> dict[str, float]:
    """The best cell of a :func:`probe_grid` ``[T, L]``, as the paper reports "the best configuration, including the
    choices of layer index and noise level": ``probe_top1``, its block ``probe_block`` (0-based) and noise level
    ``probe_t``."""
    i, j = divmod(int(grid.argmax()), grid.shape[1])
    return {"probe_top1": float(grid[i, j]), "probe_block": float(j), "probe_t": float(times[i])}
