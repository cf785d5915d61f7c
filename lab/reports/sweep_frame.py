"""The Rank page's frame of a sweep: from its members' models while it trains, or from their run folders.

:func:`rank_frame` is what the Rank page draws: the rank and probe metrics of every member and layer
(:func:`~lab.analysis.rank_sweep.sweep_rank_metrics`) and what the page shows beside them. A
:class:`~lab.jobs.sweep_job.SweepJob` builds one between training steps; :func:`checkpoint_rank_frame` builds one
from a sweep trained anywhere (``python -m lab sweep``, the Rank page, ``python -m lab submit``): each member's run
folder holds its config and ``checkpoints/last.pt``, from which its model is rebuilt and read on the sweep's data
(clean inputs for a generative task), with its last evaluation from its status.json. Both only read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lab.analysis.rank_sweep import member_features, sweep_rank_metrics
from lab.config import to_dict
from lab.data.toy2d import ToyData
from lab.nn.mlp import ResidualMLP
from lab.runs.store import CheckpointError, Run, RunFolderError, config_of_run
from lab.train.build import build_data, build_model, build_task
from lab.train.ensemble import MODEL
from lab.train.tasks import PixelTask


def rank_frame(models: Sequence[ResidualMLP], data: ToyData, *, names: Sequence[str], points: int = 512,
               ridge: float = 1e-3, diverged: Sequence[bool] | None = None,
               evals: Sequence[tuple[dict[str, float], int]] | None = None, step: int = 0,
               task: PixelTask | None = None) -> dict[str, np.ndarray]:
    """A ``rank`` frame of the members' models: :func:`~lab.analysis.rank_sweep.sweep_rank_metrics` on the first
    ``points`` training and test points, and what a page shows beside it.

    Args:
        models: the K members' models.
        data: their (shared) data.
        names: member names.
        points: training points (probe fit) and test points (ranks, probe score) used.
        ridge: the probe's ridge.
        diverged: which members diverged (left out of the correlation); default none.
        evals: per member, its last evaluation's metrics and step (default: none yet).
        step: the training step.
        task: the generative task the members learn (:mod:`lab.train.tasks`; None: they classify); their features
            are read on clean inputs (:meth:`~lab.train.tasks.PixelTask.probe_inputs`).

    Returns:
        The metrics plus ``alpha_min [K]``, ``alphas [K, L]``, ``member_names [K]``, ``train_acc``, ``test_acc``,
        ``train_loss``, ``test_loss [K]`` (NaN before an evaluation; the accuracies NaN for a generative task),
        ``eval_step [K]`` (-1 before one), ``diverged [K]``, ``final_features [K, m, H]`` (last layer, test points,
        for embeddings), ``task`` (its name, ``classify`` without one) and ``step``.
    """
    K = len(models)
    diverged = np.zeros(K, bool) if diverged is None else np.asarray(diverged, bool)
    evals = [({}, -1)] * K if evals is None else list(evals)
    x_train, y_train = data.x_train[:points], data.y_train[:points]
    x_test, y_test = data.x_test[:points], data.y_test[:points]
    inputs = torch.cat([x_train, x_test])
    features = member_features(models, inputs if task is None else task.probe_inputs(inputs))  # one forward each
    frame = sweep_rank_metrics(features[:, :, :len(x_train)], y_train, features[:, :, len(x_train):], y_test,
                               ridge=ridge, num_classes=data.num_classes, correlate=~diverged)
    nan = float("nan")
    frame.update(
        alpha_min=np.array([model.alpha_min for model in models], np.float32),
        alphas=np.array([[b.alpha for b in model.blocks] for model in models], np.float32),
        member_names=np.array(list(names)),
        train_acc=np.array([metrics.get("train_acc", nan) for metrics, _ in evals], np.float32),
        test_acc=np.array([metrics.get("test_acc", nan) for metrics, _ in evals], np.float32),
        train_loss=np.array([metrics.get("train_loss", nan) for metrics, _ in evals], np.float32),
        test_loss=np.array([metrics.get("test_loss", nan) for metrics, _ in evals], np.float32),
        task=np.array("classify" if task is None else task.name),
        eval_step=np.array([at for _, at in evals], np.int64),
        diverged=diverged,
        final_features=features[:, -1, len(x_train):].float().numpy(),
        step=np.int64(step),
    )
    return frame


def checkpoint_rank_frame(runs: Sequence[Run]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The ``rank`` frame of the members ``runs`` as their last checkpoints left them.

    Returns:
        The frame (``step`` is the newest member's) and the ids of the members left out: no readable config or
        checkpoint yet (a queued member), or a checkpoint that does not fit its config.

    Raises:
        ValueError: fewer than two members with a checkpoint, members that are not residual MLPs, or members of
            different data (a frame's members share their inputs).
    """
    members: list[tuple[Run, Any, dict[str, Any]]] = []
    left_out = []
    for run in runs:
        try:
            cfg = config_of_run(run)
            state = run.load_checkpoint("last")
        except (RunFolderError, CheckpointError, ValueError):
            left_out.append(run.id)
            continue
        if cfg.model.name != MODEL:
            raise ValueError(f"{run.id} trains {cfg.model.name}; the rank views read sweeps of {MODEL} models")
        members.append((run, cfg, state))
    if len(members) < 2:
        raise ValueError(f"{len(members)} member(s) with a checkpoint; the rank views compare two or more")
    data_settings = {repr(to_dict(cfg.data)) for _, cfg, _ in members}
    if len(data_settings) > 1:
        raise ValueError("the members train on different data; a rank frame reads every member on the same inputs")
    cfg0 = members[0][1]
    data = build_data(cfg0)
    models, kept = [], []
    for run, cfg, state in members:
        model = build_model(cfg, data)
        try:
            model.load_state_dict(state["model"])
        except (KeyError, RuntimeError):
            left_out.append(run.id)
            continue
        models.append(model)
        kept.append(run)
    if len(models) < 2:
        raise ValueError(f"{len(models)} member(s) with a checkpoint that fits; the rank views compare two or more")
    statuses = [run.read_status() for run in kept]
    frame = rank_frame(models, data, names=[run.id for run in kept],
                       diverged=[s.get("state") == "diverged" for s in statuses],
                       evals=[(s.get("metrics") or {}, int(s.get("step") or 0)) for s in statuses],
                       step=max(int(s.get("step") or 0) for s in statuses), task=build_task(cfg0, data))
    return frame, left_out
