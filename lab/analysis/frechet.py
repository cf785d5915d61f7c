"""The Fréchet distance between two sets of images in the features of a network, and digits-FD.

d² = ‖μ_r − μ_f‖² + Tr(Σ_r + Σ_f − 2 (Σ_r Σ_f)^½) between Gaussians fitted to the features of real and generated
images, as FID computes it in Inception's pool features (torchmetrics' ``FrechetInceptionDistance`` does the
arithmetic, for any feature network). **digits-FD** is the same distance in the penultimate features of the lab's
digits classifier (:mod:`lab.analysis.digits_features`): comparable with itself, never with a published FID.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


def to_pixels(images: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """Images ``[n, C, H, W]`` in a model's standardised scale back to pixels in [0, 1] (clamped)."""
    view = (1, -1, 1, 1)
    m = torch.as_tensor(mean, dtype=images.dtype).reshape(view)
    s = torch.as_tensor(std, dtype=images.dtype).reshape(view)
    return (images * s + m).clamp(0.0, 1.0)


def frechet_distance(extractor: nn.Module, real: Iterable[Tensor], fake: Iterable[Tensor], *,
                     device: torch.device | str = "cpu") -> float:
    """torchmetrics' Fréchet distance between the images of ``real`` and ``fake`` (batches of pixels in [0, 1]) in
    the features of ``extractor`` (a module with ``num_features`` that reads such pixels)."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    metric = FrechetInceptionDistance(feature=extractor).to(device)
    with torch.no_grad():
        for batches, is_real in ((real, True), (fake, False)):
            for batch in batches:
                metric.update(batch.to(device), real=is_real)
    return float(metric.compute())


def digits_fd(samples: Tensor, reference: Tensor, mean: tuple[float, ...], std: tuple[float, ...], *,
              batch_size: int = 500) -> float:
    """digits-FD of a model's samples ``[n, 1, H, W]`` (in its standardised scale: ``(mean, std)`` map pixels to it)
    from ``reference`` digits ``[m, 1, H, W]`` given as pixels in [0, 1]."""
    from lab.analysis.digits_features import digits_classifier

    judge = digits_classifier(reference.shape[-1])
    fake = to_pixels(samples.float().cpu(), mean, std)
    return frechet_distance(judge, reference.split(batch_size), fake.split(batch_size))
