"""The seed rule: every random draw of a run is a pure function of its seed and its position.

Batch order is a function of (``train.seed``, epoch); a loader step's masks, drop paths and dropout of (seed, step,
rank); a training sample's augmentation of (seed, epoch, index). So a run stopped and resumed at any step, on any
number of loader workers, draws exactly what it would have drawn, and the ensemble's members draw what their solo
runs draw. Every trainer and keyed dataset takes its seeds from here.
"""

from __future__ import annotations

SEED_MAX = 2**32 - 1
"""The largest seed a config may hold (``model.seed``, ``data.seed``, ``train.seed``): numpy's legacy generators and
scikit-learn take seeds in [0, 2**32), the tightest range of the libraries a run seeds; torch takes any 64-bit one."""

SEED_SPACE = 2**64
"""Every seed derived here is taken modulo this: torch's generators take seeds below 2**64, which a sample's seed of a
run seed above about 1.8 million exceeds. A derived seed below it is unchanged, so every run that could train before
draws what it drew."""

EPOCH_SEED_STRIDE = 1_000_003
"""A prime stride between runs' seeds: run seed s and epoch e give s · stride + e, so runs whose seeds differ by
one never share an epoch's permutation for any realistic number of epochs."""

RANK_SEED_STRIDE = 1_009
"""A prime stride between the processes of one step (loader engine)."""

INDEX_SEED_STRIDE = 10_000_019
"""A prime stride between the samples of one epoch (larger than any data set's length)."""


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of an epoch's batch order: a pure function of (``train.seed``, epoch), so a run resumed at any step
    sees the batches it would have seen."""
    return (seed * EPOCH_SEED_STRIDE + epoch) % SEED_SPACE


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of every random draw of one step on one process (crops, MAE masks, drop paths; loader engine)."""
    return (epoch_seed(seed, step) * RANK_SEED_STRIDE + rank) % SEED_SPACE


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one training sample's augmentation in one epoch, whichever worker decodes it."""
    return (epoch_seed(seed, epoch) * INDEX_SEED_STRIDE + index) % SEED_SPACE
