"""The Rank page's snapshot of a sweep: from its members' models while it trains, or from their run folders.

:func:`rank_snapshot` is what the Rank page draws: the rank and probe metrics of every member and layer
(:func:`~lab.analysis.rank_sweep.sweep_rank_metrics`) and what the page shows beside them. A
:class:`~lab.jobs.sweep_job.SweepJob` builds one between training steps; :func:`checkpoint_rank_snapshot` builds one
from a sweep trained anywhere (``python -m lab sweep``, the Rank page, ``python -m lab submit``): each member's run
folder holds its config and ``checkpoints/last.pt``, from which its model is rebuilt and read on the sweep's data
(clean inputs for a generative task), with its last evaluation from its status.json. Both only read.

A sweep folder may come from anywhere, so nothing a member's files ask for is built before it is checked: its model
is first laid out on the ``meta`` device (no memory) and refused above :data:`MAX_PARAMETERS`; its checkpoint is
opened memory-mapped with ``weights_only=True`` (the optimiser state it also holds is never read) and its tensors
compared with that layout; only a member that passes is built, and only the weights are copied in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from lab.analysis.rank_sweep import member_features, sweep_rank_metrics
from lab.config import ConfigError, ExperimentConfig, apply_overrides, config_of_run, to_dict
from lab.data.toy2d import TOY_DATASETS, ToyData
from lab.nn.mlp import ResidualMLP
from lab.runfolder.layout import Checkpoint, RunState
from lab.runs.catalog import clean_status
from lab.runs.store import Run, RunFolderError
from lab.train.build import build_data, build_model, build_task
from lab.train.ensemble import MODEL
from lab.train.tasks import PixelTask

MAX_MEMBERS = 64
"""The most members a rank snapshot reads."""
MAX_PARAMETERS = 20_000_000
"""The most parameters a member's model may have to be read (a 32-block MLP 780 wide)."""
MAX_POINTS_DATA = 16_384
"""A toy sweep's data are drawn with at most this many samples for the snapshot (its first points are read)."""


def rank_preview(cfg: ExperimentConfig, alpha_mins: Sequence[float],
                 progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """The ``rank`` snapshot of the untrained members of a sweep of ``cfg`` over ``model.alpha_min`` (what the Rank
    page draws before training, computed in a bounded child: :mod:`lab.jobs.bounded`)."""
    data = build_data(cfg)
    models = []
    for i, a in enumerate(alpha_mins):
        if progress is not None:
            progress(i, len(alpha_mins) + 1)
        models.append(build_model(apply_overrides(cfg, {"model.alpha_min": a}), data))
    return rank_snapshot(models, data, names=[f"alpha_min-{a:g}" for a in alpha_mins], task=build_task(cfg, data))


def rank_snapshot(models: Sequence[ResidualMLP], data: ToyData, *, names: Sequence[str], points: int = 512,
               ridge: float = 1e-3, diverged: Sequence[bool] | None = None,
               evals: Sequence[tuple[dict[str, float], int]] | None = None, step: int = 0,
               task: PixelTask | None = None) -> dict[str, np.ndarray]:
    """A ``rank`` snapshot of the members' models: :func:`~lab.analysis.rank_sweep.sweep_rank_metrics` on the first
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
        ``eval_step [K]`` (-1 before one), ``diverged [K]``, ``final_features [K, m, H]`` (the representation's
        layer, ``layer``: the last, or a toy MAE's bottleneck; test points, for embeddings), ``probe_few [K]`` for a
        generative task (:func:`~lab.analysis.rank_sweep.few_label_probe_accuracy`), ``task`` (its name,
        ``classify`` without one) and ``step``.
    """
    K = len(models)
    diverged = np.zeros(K, bool) if diverged is None else np.asarray(diverged, bool)
    evals = [({}, -1)] * K if evals is None else list(evals)
    x_train, y_train = data.x_train[:points], data.y_train[:points]
    x_test, y_test = data.x_test[:points], data.y_test[:points]
    inputs = torch.cat([x_train, x_test])
    features = member_features(models, inputs if task is None else task.probe_inputs(inputs))  # one forward each
    layer = models[0].representation  # a toy MAE's bottleneck; the last block of any other residual MLP
    snapshot = sweep_rank_metrics(features[:, :, :len(x_train)], y_train, features[:, :, len(x_train):], y_test,
                                  ridge=ridge, num_classes=data.num_classes, correlate=~diverged, layer=layer,
                                  few_labels=task is not None)
    nan = float("nan")
    snapshot.update(
        alpha_min=np.array([model.alpha_min for model in models], np.float32),
        alphas=np.array([[b.alpha for b in model.blocks] for model in models], np.float32),
        member_names=np.array(list(names)),
        train_acc=np.array([metrics.get("train_acc", nan) for metrics, _ in evals], np.float32),
        test_acc=np.array([metrics.get("test_acc", nan) for metrics, _ in evals], np.float32),
        train_loss=np.array([metrics.get("train_loss", nan) for metrics, _ in evals], np.float32),
        test_loss=np.array([metrics.get("test_loss", nan) for metrics, _ in evals], np.float32),
        task=np.array("classify" if task is None else task.name),
        structure=np.array("unet" if models[0].skips else "no_skips" if layer != models[0].depth else "no_decoder"),
        eval_step=np.array([at for _, at in evals], np.int64),
        diverged=diverged,
        final_features=features[:, layer, len(x_train):].float().numpy(),
        step=np.int64(step),
    )
    return snapshot


def _member(run: Run) -> tuple[ExperimentConfig, dict[str, torch.Tensor]]:
    """A member's config and its checkpoint's weights (memory-mapped), checked against the model the config asks
    for before anything is built.

    Raises:
        LookupError: the member cannot be read (the message says why; it is left out).
        ValueError: it is not a residual MLP (no member of such a sweep can be read).
    """
    try:
        cfg = config_of_run(run)
    except (RunFolderError, ConfigError, ValueError, TypeError) as err:
        raise LookupError(f"{run.id}: no readable config ({err})") from None
    if cfg.model.name != MODEL:
        raise ValueError(f"{run.id} trains {cfg.model.name}; the rank views read sweeps of {MODEL} models")
    with torch.device("meta"):  # the layout the config asks for, without its memory
        layout = build_model(cfg).state_dict()
    size = sum(t.numel() for t in layout.values())
    if size > MAX_PARAMETERS:
        raise LookupError(f"{run.id}: its model has {size:,} parameters; the rank views read members of at most "
                          f"{MAX_PARAMETERS:,}")
    path = run.checkpoint_path(Checkpoint.LAST)
    if not path.is_file() or path.is_symlink() or path.parent.is_symlink():
        raise LookupError(f"{run.id}: no checkpoint yet")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # torch raises several types for corrupt or foreign files
        raise LookupError(f"{run.id}: checkpoints/last.pt is not readable ({str(err).splitlines()[0][:80]})") from None
    weights = state.get("model") if isinstance(state, dict) else None
    if not isinstance(weights, dict) or set(weights) != set(layout) or any(
            not isinstance(weights[k], torch.Tensor) or weights[k].shape != v.shape or weights[k].dtype != v.dtype
            for k, v in layout.items()):
        raise LookupError(f"{run.id}: its checkpoint does not hold the weights of the model its config describes")
    return cfg, weights


def checkpoint_rank_snapshot(runs: Sequence[Run]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The ``rank`` snapshot of the members ``runs`` as their last checkpoints left them (at most :data:`MAX_MEMBERS`).

    Returns:
        The snapshot (``step`` is the newest member's) and, for each member left out, why: no readable config or
        checkpoint yet (a queued member), a model over :data:`MAX_PARAMETERS`, or a checkpoint that does not fit
        its config.

    Raises:
        ValueError: fewer than two members with a checkpoint, members that are not residual MLPs, or members of
            different data (a snapshot's members share their inputs).
    """
    members: list[tuple[Run, ExperimentConfig, dict[str, torch.Tensor]]] = []
    left_out = [f"{run.id}: past the first {MAX_MEMBERS} members" for run in runs[MAX_MEMBERS:]]
    for run in runs[:MAX_MEMBERS]:
        try:
            members.append((run, *_member(run)))
        except LookupError as err:
            left_out.append(str(err))
    if len(members) < 2:
        raise ValueError(f"{len(members)} member(s) with a checkpoint that fits; the rank views compare two or more")
    data_settings = {repr(to_dict(cfg.data)) for _, cfg, _ in members}
    if len(data_settings) > 1:
        raise ValueError("the members train on different data; a rank snapshot reads every member on the same inputs")
    cfg0 = members[0][1]
    if cfg0.data.name in TOY_DATASETS and cfg0.data.n > MAX_POINTS_DATA:
        cfg0 = apply_overrides(cfg0, {"data.n": MAX_POINTS_DATA})
    data = build_data(cfg0)
    models = []
    for _, cfg, weights in members:
        model = build_model(cfg, data)
        model.load_state_dict(weights)  # checked to fit: the weights alone are copied in
        models.append(model)
    kept = [run for run, _, _ in members]
    statuses = [clean_status(run.read_status())[0] for run in kept]
    snapshot = rank_snapshot(models, data, names=[run.id for run in kept],
                          diverged=[s["state"] == RunState.DIVERGED for s in statuses],
                          evals=[(s["metrics"], s["step"] or 0) for s in statuses],
                          step=max(s["step"] or 0 for s in statuses), task=build_task(cfg0, data))
    return snapshot, left_out


def folders_rank_snapshot(folders: Sequence[str], progress: Callable[[int, int], None] | None = None,
                          ) -> tuple[dict[str, np.ndarray], list[str]]:
    """:func:`checkpoint_rank_snapshot` of the members in ``folders`` (what a page's bounded child runs; it reports
    no ``progress``, which :class:`~lab.jobs.bounded.BoundedTask` passes to every function)."""
    return checkpoint_rank_snapshot([Run(Path(f)) for f in folders])
