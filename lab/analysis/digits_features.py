"""The feature space of "digits-FD": the penultimate layer of a small classifier of scikit-learn's digits.

FID measures a generator in the pool features of an ImageNet Inception network, which has never seen an 8 × 8 grey
digit and whose weights cannot ship with the lab. For models of the digits the lab trains its own judge instead: a
two-hidden-layer MLP on the digits' training split at the size the generator draws, whose last hidden layer (64
ReLU units, the features that separate the classes) takes the place of Inception's pool features. The Fréchet
distance in that space is called **digits-FD**; its numbers are comparable with each other, never with a
published FID.

Training is seeded and takes about a second on a CPU, so the judge is not stored: every process trains the same
one (:func:`digits_classifier` keeps it per image size).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DigitsFeatures", "digits_classifier"]


class DigitsFeatures(nn.Module):
    """A digits classifier whose ``forward`` returns its penultimate features.

    Args:
        image_size: side of the square grey images it reads.
        mean: pixel mean of its training images (it standardises its input itself).
        std: pixel std of its training images.
        hidden: width of the first hidden layer.
        num_features: width of the penultimate layer, the features.
    """

    def __init__(self, image_size: int, mean: float, std: float, hidden: int = 256, num_features: int = 64) -> None:
        super().__init__()
        self.image_size = image_size
        self.num_features = num_features  # read by torchmetrics' Fréchet distance
        self.register_buffer("mean", torch.tensor(float(mean)))
        self.register_buffer("std", torch.tensor(float(std)))
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(image_size * image_size, hidden), nn.ReLU(),
                                  nn.Linear(hidden, num_features), nn.ReLU())
        self.head = nn.Linear(num_features, 10)
        self.test_accuracy = float("nan")  # set by digits_classifier

    def forward(self, pixels: Tensor) -> Tensor:
        """Features ``[n, num_features]`` of grey images ``[n, 1, H, W]`` with pixels in [0, 1] (any side: resized
        to ``image_size`` with antialiasing)."""
        if pixels.shape[-2:] != (self.image_size, self.image_size):
            pixels = F.interpolate(pixels, size=(self.image_size, self.image_size), mode="bilinear",
                                   antialias=True, align_corners=False)
        return self.body((pixels.float() - self.mean) / self.std)

    def logits(self, pixels: Tensor) -> Tensor:
        """Class scores ``[n, 10]``."""
        return self.head(self.forward(pixels))


@functools.lru_cache(maxsize=4)
@torch.enable_grad()  # it trains, even when first asked for inside an evaluation
def digits_classifier(image_size: int = 8, *, epochs: int = 40, seed: int = 0) -> DigitsFeatures:
    """The digits classifier at side ``image_size``, trained on the digits' training split (the lab's default split,
    seed 0) with AdamW; frozen, in eval mode, its held-out accuracy in ``test_accuracy``.

    The same arguments give the same weights in every process (seeded, full-precision CPU training).
    """
    from lab.data.readers import load_digits

    digits = load_digits(image_size=image_size, seed=0)
    x, y = digits.x_train, digits.y_train
    std, mean = torch.std_mean(x)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DigitsFeatures(image_size, float(mean), float(std))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    for _ in range(epochs):
        for batch in torch.randperm(len(x), generator=generator).split(64):
            loss = F.cross_entropy(model.logits(x[batch]), y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    model.eval().requires_grad_(False)
    with torch.no_grad():
        model.test_accuracy = float((model.logits(digits.x_test).argmax(1) == digits.y_test).float().mean())
    return model
