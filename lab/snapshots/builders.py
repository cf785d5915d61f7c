"""Snapshot builders: what a job publishes for the views, computed from the model between steps (by the training
thread, or by a page's job from a copy taken between steps, beside training: :mod:`lab.snapshots.shadow`).

A builder maps a model to a dict of float32 numpy arrays (the publisher adds the step). Builders take the model,
not the trainer, so a page can draw an untrained model, a loaded checkpoint or a training one alike.

Each builder judges its own snapshots: a snapshot it returns is published, None is not. A plain function is judged by
the default rule (a snapshot holding NaN or inf is never published: the last good one stays); a :class:`SelfJudged`
builder decides alone, for snapshots where NaN means "undefined".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lab.analysis.jacobian import jacobian_shapes
from lab.analysis.node_maps import RESOLUTION, node_maps
from lab.analysis.residual_alignment import PAPER_K, RA4_FIT_START, residual_alignment
from lab.analysis.similarity import layer_distances, linear_cka
from lab.config import ExperimentConfig
from lab.data.toy2d import ToyData
from lab.train.build import build_data, build_model

Builder = Callable[[nn.Module], "dict[str, np.ndarray] | None"]


@dataclass(frozen=True)
class SelfJudged:
    """A builder that judges its own snapshots: it returns None for a snapshot not to publish, and every snapshot it
    returns is published as it is, NaN included (where NaN means "undefined", not "broken").

    Attributes:
        build: the builder function.
    """

    build: Builder

    def __call__(self, model: nn.Module) -> dict[str, np.ndarray] | None:
        return self.build(model)


def all_finite(arrays: dict[str, np.ndarray]) -> bool:
    """True when every floating array is free of NaN and inf."""
    return all(np.isfinite(a).all() for a in arrays.values() if np.issubdtype(np.asarray(a).dtype, np.floating))


def judged(builder: Builder) -> SelfJudged:
    """``builder`` as one that judges its own snapshots: itself when it is :class:`SelfJudged`, else it with the
    default judgement (a snapshot holding NaN or inf is not published)."""
    if isinstance(builder, SelfJudged):
        return builder

    def build(model: nn.Module) -> dict[str, np.ndarray] | None:
        snapshot = builder(model)
        return snapshot if snapshot is not None and all_finite(snapshot) else None

    return SelfJudged(build)


def nodes_snapshot(model: nn.Module, resolution: int = RESOLUTION, limit: float = 1.0) -> dict[str, np.ndarray]:
    """Node maps ``[L+1, H, R, R]``, weights ``[L+1, H, H_in]``, decision ``[R, R]`` and the α of every block."""
    snapshot = node_maps(model, resolution, limit).as_arrays()
    snapshot["alphas"] = np.array([b.alpha for _, b in model.iter_blocks()], np.float32)
    return snapshot


@torch.no_grad()
def similarity_snapshot(model: nn.Module, resolution: int = RESOLUTION, limit: float = 1.0,
                        cka_points: int = 625) -> dict[str, np.ndarray]:
    """Layer distance ``[L+1, L+1]`` on the full grid and linear CKA on an evenly strided subset of it."""
    maps = node_maps(model, resolution, limit).maps  # [L+1, H, R, R]
    feats = torch.from_numpy(maps).flatten(2).transpose(1, 2)  # [L+1, R*R, H]
    stride = max(1, feats.shape[1] // cka_points)
    return {"distance": layer_distances(feats).numpy(), "cka": linear_cka(feats[:, ::stride]).numpy()}


# torch.func's forward-mode AD keeps process-wide state (its dual levels): two threads taking Jacobians at
# once (a run and its lockstep twin) break each other's, so alignment snapshots are built one at a time.
_FUNCTORCH = threading.Lock()


def alignment_builder(data: ToyData, *, k: int = PAPER_K, inputs: int = 64, nc_inputs: int = 500,
                      grid_inputs: int = 1, baseline_trials: int = 8, fit_start: int = RA4_FIT_START,
                      seed: int = 0) -> SelfJudged:
    """A builder of ``alignment`` snapshots: :func:`~lab.analysis.residual_alignment.residual_alignment` of the
    model at the first ``inputs`` test inputs (NC on the first ``nc_inputs`` training inputs).

    The inputs are fixed when the builder is made, so successive snapshots of a run are comparable; the builder holds
    them, not the data set, and pickles (a job in a child process gets a copy). It judges its own snapshots
    (:class:`SelfJudged`): it returns None (no snapshot) while the model's singular values are not finite, so a
    diverging model publishes nothing; NaN is otherwise meaningful in these snapshots (pairs of blocks in different
    conv stages, a 1/σ₁ fit of one block). ``k`` (the paper's K = 30 unless told) is capped at the smallest
    block's Jacobian size; ``fit_start`` is the
    first block (0-based) of the 1/σ₁ fit (the paper's: from block 5).
    """
    return SelfJudged(_AlignmentSnapshots(
        x=data.x_test[:inputs], y=data.y_test[:inputs], nc_x=data.x_train[:nc_inputs], nc_y=data.y_train[:nc_inputs],
        num_classes=data.num_classes, k=k, grid_inputs=grid_inputs, baseline_trials=baseline_trials,
        fit_start=fit_start, seed=seed))


@dataclass
class _AlignmentSnapshots:
    """:func:`alignment_builder`'s builder: its fixed inputs and settings."""

    x: torch.Tensor
    y: torch.Tensor
    nc_x: torch.Tensor
    nc_y: torch.Tensor
    num_classes: int
    k: int
    grid_inputs: int
    baseline_trials: int
    fit_start: int
    seed: int
    width: int | None = None  # the smallest Jacobian size, measured on the first snapshot

    def __call__(self, model: nn.Module) -> dict[str, np.ndarray] | None:
        device = next(model.parameters()).device
        if self.width is None:
            self.width = min(min(shape) for shape in jacobian_shapes(model, self.x[:1].to(device)))
        with _FUNCTORCH:
            snapshot = residual_alignment(model, self.x.to(device), self.y.to(device), min(self.k, self.width),
                                          nc_x=self.nc_x.to(device), nc_y=self.nc_y.to(device),
                                          num_classes=self.num_classes, grid_inputs=self.grid_inputs,
                                          baseline_trials=self.baseline_trials, fit_start=self.fit_start,
                                          seed=self.seed)
        if not np.isfinite(snapshot["sigma"]).all():
            return None
        return {key: (v.astype(np.float32) if v.dtype == np.float64 else v) for key, v in snapshot.items()}


@dataclass
class _AlignmentFromConfig:
    """:func:`alignment_builder_of`'s builder: the data's inputs are read where the first snapshot is built."""

    cfg: ExperimentConfig
    kwargs: dict[str, Any]
    build: SelfJudged | None = None

    def __call__(self, model: nn.Module) -> dict[str, np.ndarray] | None:
        if self.build is None:
            self.build = alignment_builder(build_data(self.cfg), **self.kwargs)
        return self.build(model)


def alignment_builder_of(cfg: ExperimentConfig, **kwargs: Any) -> SelfJudged:
    """:func:`alignment_builder` on the data of ``cfg``, read where the builder first runs (a page's training child),
    never by the server that hands it over; ``kwargs`` as :func:`alignment_builder` takes them."""
    return SelfJudged(_AlignmentFromConfig(cfg, kwargs))


def alignment_preview(cfgs: Sequence[ExperimentConfig], *, k: int = PAPER_K, inputs: int = 64,
                      fit_start: int = RA4_FIT_START,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The ``alignment`` snapshots of the untrained networks ``cfgs`` describe, on the first one's data (what the
    Alignment page draws before training, computed in a bounded child: :mod:`lab.jobs.bounded`).

    Returns:
        ``{"snapshots": [snapshot or None per config], "k": the K used}`` (K capped at the smallest Jacobian size).
    """
    data = build_data(cfgs[0])
    snapshots, used = [], k
    for i, cfg in enumerate(cfgs):
        if progress is not None:
            progress(i, len(cfgs))
        snapshots_of = alignment_builder(data, k=k, inputs=inputs, fit_start=fit_start)
        snapshots.append(snapshots_of(build_model(cfg, data)))
        used = min(used, snapshots_of.build.width or k)
    if progress is not None:
        progress(len(cfgs), len(cfgs))
    return {"snapshots": snapshots, "k": used}
