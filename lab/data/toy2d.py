"""Toy 2-D classification sets: the ResidualDroppath paper's spiral and TensorFlow Playground's four sets.

The spiral is that of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections* (§3.1).

All sets return float32 points ``X [n, 2]`` and int64 labels ``y [n]`` (classes 0 and 1, half each) and live on
the evaluation grid's square [−1, 1]². Playground's sets are generated exactly as its ``dataset.ts`` does, in its
units (a square of side 12), then divided by 6 — the shapes and noise levels users know, on the ResidualDroppath
paper's grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

TOY_DATASETS = ("spiral", "playground_spiral", "circle", "xor", "gauss")
PLAYGROUND_SCALE = 6.0  # Playground's points lie in [-6, 6]^2


@dataclass(frozen=True)
class ToyData:
    """A train/test split of a 2-D set: ``x_* [n, 2]`` float32, ``y_* [n]`` int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    name: str = "spiral"

    @property
    def num_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max() if len(self.y_test) else 0)) + 1

    def to(self, device: torch.device | str) -> ToyData:
        """The same split on ``device``."""
        return ToyData(self.x_train.to(device), self.y_train.to(device), self.x_test.to(device),
                       self.y_test.to(device), self.name)


def _half(n: int) -> int:
    if n < 2 or n % 2:
        raise ValueError(f"n must be an even number >= 2 (half per class); got {n}")
    return n // 2


def _pack(points0: np.ndarray, points1: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    x = np.concatenate([points0, points1]).astype(np.float32)
    y = np.concatenate([np.zeros(len(points0)), np.ones(len(points1))]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def spiral(n: int = 16384, seed: int = 0, noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The spiral of the ResidualDroppath paper, §3.1.

    Angles a ~ U(0, 2π) and radius r = a / 2π; class 0 at (r sin a, r cos a), class 1 at the shifted angle a + π
    with the same radius (so each class-1 point is the negated class-0 point). ``noise`` adds isotropic Gaussian
    noise of that standard deviation (0 in the paper).

    Returns:
        ``X [n, 2]`` float32 in the unit disc, ``y [n]`` int64; the first n/2 rows are class 0.
    """
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 2.0 * np.pi, _half(n))
    r = a / (2.0 * np.pi)
    p0 = np.stack([r * np.sin(a), r * np.cos(a)], axis=1)
    p1 = np.stack([r * np.sin(a + np.pi), r * np.cos(a + np.pi)], axis=1)
    if noise:
        p0 = p0 + rng.normal(0.0, noise, p0.shape)
        p1 = p1 + rng.normal(0.0, noise, p1.shape)
    return _pack(p0, p1)


def playground_spiral(n: int = 500, seed: int = 0, noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Playground's spiral: r = 5i/m, t = 1.75 · 2π i/m + Δ (Δ = 0 and π), uniform noise in ±noise (m = n/2)."""
    rng = np.random.default_rng(seed)
    m = _half(n)
    i = np.arange(m)
    r = i / m * 5.0

    def arm(delta: float) -> np.ndarray:
        t = 1.75 * i / m * 2.0 * np.pi + delta
        p = np.stack([r * np.sin(t), r * np.cos(t)], axis=1)
        return p + rng.uniform(-1.0, 1.0, p.shape) * noise

    positive, negative = arm(0.0), arm(np.pi)
    return _pack(negative / PLAYGROUND_SCALE, positive / PLAYGROUND_SCALE)


def circle(n: int = 500, seed: int = 0, noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Playground's circle: class 1 inside radius 2.5 of a radius-5 disc, class 0 in the ring 3.5–5.

    As in Playground, the label is decided after adding uniform noise (± 5 · noise) to the point, so noisy
    points near the border can change side.
    """
    rng = np.random.default_rng(seed)
    m, radius = _half(n), 5.0

    def disc(r_lo: float, r_hi: float) -> tuple[np.ndarray, np.ndarray]:
        r = rng.uniform(r_lo, r_hi, m)
        angle = rng.uniform(0.0, 2.0 * np.pi, m)
        p = np.stack([r * np.sin(angle), r * np.cos(angle)], axis=1)
        shifted = p + rng.uniform(-radius, radius, p.shape) * noise
        label = (np.linalg.norm(shifted, axis=1) < radius * 0.5).astype(np.int64)
        return p, label

    p_in, l_in = disc(0.0, radius * 0.5)
    p_out, l_out = disc(radius * 0.7, radius)
    x = np.concatenate([p_in, p_out]) / PLAYGROUND_SCALE
    y = np.concatenate([l_in, l_out])
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def xor(n: int = 500, seed: int = 0, noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Playground's XOR: uniform points in [−5, 5]², pushed 0.3 away from the axes; class 1 where x·y ≥ 0
    (decided after uniform noise of ± 5 · noise)."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(-5.0, 5.0, (n, 2))
    p = p + np.where(p > 0, 0.3, -0.3)
    shifted = p + rng.uniform(-5.0, 5.0, p.shape) * noise
    y = (shifted[:, 0] * shifted[:, 1] >= 0).astype(np.int64)
    return torch.from_numpy((p / PLAYGROUND_SCALE).astype(np.float32)), torch.from_numpy(y)


def gauss(n: int = 500, seed: int = 0, noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Playground's two Gaussians at (2, 2) (class 1) and (−2, −2) (class 0); variance 0.5 + 7 · noise
    (Playground's linear map of noise ∈ [0, 0.5] to variance ∈ [0.5, 4])."""
    rng = np.random.default_rng(seed)
    m = _half(n)
    variance = 0.5 + noise * (4.0 - 0.5) / 0.5
    sd = np.sqrt(variance)
    positive = rng.normal(2.0, sd, (m, 2))
    negative = rng.normal(-2.0, sd, (m, 2))
    return _pack(negative / PLAYGROUND_SCALE, positive / PLAYGROUND_SCALE)


_GENERATORS = {"spiral": spiral, "playground_spiral": playground_spiral, "circle": circle, "xor": xor,
               "gauss": gauss}


def make_points(name: str, n: int, *, seed: int = 0, noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X [n, 2], y [n])`` of the named set."""
    if name not in _GENERATORS:
        raise ValueError(f"unknown toy dataset {name!r}; valid: {', '.join(TOY_DATASETS)}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0; got {noise}")
    return _GENERATORS[name](n, seed=seed, noise=noise)


def train_test_split(x: torch.Tensor, y: torch.Tensor, train_fraction: float = 0.8, seed: int = 0,
                     name: str = "") -> ToyData:
    """A seeded random split; at least one training sample, the rest (possibly none) for testing."""
    if not 0.0 < train_fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1]; got {train_fraction}")
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_train = max(1, min(len(x), round(train_fraction * len(x))))
    tr, te = perm[:n_train], perm[n_train:]
    return ToyData(x[tr], y[tr], x[te], y[te], name)


def make_toy_data(cfg) -> ToyData:
    """The split described by a :class:`lab.config.DataConfig` (same seed → same points and split)."""
    x, y = make_points(cfg.name, cfg.n, seed=cfg.seed, noise=cfg.noise)
    return train_test_split(x, y, cfg.train_fraction, seed=cfg.seed, name=cfg.name)
