"""`ImageSplit`: a train/test pair of image tensors with its class names, and the transforms on it.

Conventions: images are float32 `[n, C, H, W]` in [0, 1] (before `normalized`), labels int64 in `0..C-1`. A class
subset is relabelled in the order given and `ImageSplit.source_labels` keeps the original label of each new one.
The transforms (`flat`, `normalized`, `standardize`) return new splits and record what they did in `mean`/`std`,
so normalization can be undone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch.utils.data import TensorDataset

__all__ = ["ImageSplit"]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ImageSplit:
    """A train/test pair of image tensors with class names.

    Attributes:
        x_train: float32 `[n_train, C, H, W]` (`[n_train, D]` after `flat()`).
        y_train: int64 `[n_train]` in `0..num_classes-1`.
        x_test: float32 `[n_test, C, H, W]`.
        y_test: int64 `[n_test]`.
        classes: name of each label.
        name: dataset name, e.g. "mnist".
        source_labels: original dataset label of each label, for class subsets (default: identity).
        mean: per-channel mean subtracted by `normalized` (None: raw [0, 1] pixels); keep it to undo normalization.
        std: per-channel std divided by `normalized`.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[str, ...]
    name: str
    source_labels: tuple[int, ...] = ()
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(self.classes))
        object.__setattr__(self, "source_labels", tuple(self.source_labels) or tuple(range(len(self.classes))))
        for x, y, part in ((self.x_train, self.y_train, "train"), (self.x_test, self.y_test, "test")):
            if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
                raise ValueError(f"{part}: need x [n, ...] and y [n], got {tuple(x.shape)} and {tuple(y.shape)}")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(f"train and test shapes differ: {self.x_train.shape[1:]} vs {self.x_test.shape[1:]}")
        if len(self.source_labels) != len(self.classes):
            raise ValueError(f"{len(self.classes)} classes but {len(self.source_labels)} source labels")

    @property
    def num_classes(self) -> int:
        """Number of classes C (labels are `0..C-1`)."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input: `(C, H, W)`, or `(D,)` after `flat()`."""
        return tuple(self.x_train.shape[1:])

    def __repr__(self) -> str:
        norm = "raw" if self.mean is None else "normalized"
        return (
            f"ImageSplit(name={self.name!r}, train={len(self.x_train)}, test={len(self.x_test)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes}, {norm})"
        )

    def flat(self) -> ImageSplit:
        """Same split with inputs flattened to `[n, C*H*W]` views (no copy), for fully-connected ResNets."""
        return dataclasses.replace(self, x_train=self.x_train.flatten(1), x_test=self.x_test.flatten(1))

    def normalized(self, mean: float | Sequence[float], std: float | Sequence[float]) -> ImageSplit:
        """Return `(x - mean) / std` per channel (dim 1), applied to train and test alike.

        Args:
            mean: one value, or one per channel (per feature after `flat()`).
            std: same form as `mean`; must be positive.

        Normalizing twice composes: `mean`/`std` on the result describe the whole map from raw pixels.
        """
        m = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
        s = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
        channels = self.x_train.shape[1]
        if len(m) not in (1, channels) or len(s) not in (1, channels) or bool((s <= 0).any()):
            raise ValueError(f"mean/std need 1 or {channels} values and std > 0, got {mean!r}, {std!r}")
        view = (1, -1) + (1,) * (self.x_train.ndim - 2)  # broadcast over dim 1
        mean_all, std_all = m.expand(channels), s.expand(channels)
        if self.mean is not None:  # (x - m0)/s0 then (. - m)/s  ==  (x - (m0 + m*s0)) / (s0*s)
            if len(self.mean) != channels:
                raise ValueError("already normalized per channel: normalize again before flat(), not after")
            m0, s0 = torch.tensor(self.mean), torch.tensor(self.std)
            mean_all, std_all = m0 + mean_all * s0, s0 * std_all
        return dataclasses.replace(
            self,
            x_train=(self.x_train - m.reshape(view)) / s.reshape(view),
            x_test=(self.x_test - m.reshape(view)) / s.reshape(view),
            mean=tuple(mean_all.tolist()),
            std=tuple(std_all.tolist()),
        )

    def statistics(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """`(mean, std)` per channel of the *training* images, as `standardize` normalizes with them (std at least
        1e-8); computed without a normalized copy."""
        dims = [d for d in range(self.x_train.ndim) if d != 1]
        std, mean = torch.std_mean(self.x_train, dim=dims, correction=0)
        return tuple(mean.tolist()), tuple(std.clamp_min(1e-8).tolist())

    def standardize(self) -> ImageSplit:
        """Normalize with the per-channel mean and std of the *training* images (test statistics never leak in)."""
        return self.normalized(*self.statistics())

    def datasets(self) -> tuple[TensorDataset, TensorDataset]:
        """`(train, test)` as `TensorDataset`s for a `DataLoader`."""
        return TensorDataset(self.x_train, self.y_train), TensorDataset(self.x_test, self.y_test)
