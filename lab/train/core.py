"""What the three trainers share: the events they emit, the face callbacks see, divergence, and the run's rules.

The tensor trainer (:mod:`lab.train.tensor`), the loader trainer (:mod:`lab.train.loader`) and the ensemble
(:mod:`lab.train.ensemble`, whose members each look like a trainer) differ in how a step is computed, not in what a
step means. Here, once:

- :class:`Callback`, the subscriber to a trainer's events, typed against :class:`TrainerView`, the face of a
  running trainer that callbacks read (the run recorder, the snapshot publishers, the progress bar, stop checks);
- :class:`Diverged` and :func:`divergence_hint`: a non-finite loss and its likely cause;
- the drop-path mode of a step (:func:`droppath_mode`), the batch schedule of a tensor run
  (:func:`batch_schedule`), whether a step ends with an evaluation (:func:`evaluates_after`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from lab.config import ConfigError, TrainConfig
from lab.nn.droppath import DropPath


@runtime_checkable
class TrainerView(Protocol):
    """What a callback may read of the trainer that calls it, and ``should_stop``, which it may set.

    :class:`~lab.train.tensor.Trainer` and :class:`~lab.train.loader.LoaderTrainer` satisfy it, and so does each
    :class:`~lab.train.ensemble.EnsembleMember` (a member of an ensemble presented as the run it would be alone).

    Attributes:
        cfg: the train section.
        step: optimisation steps done (the global step; a resumed run starts at its checkpoint's).
        total_steps: the run's length in steps.
        steps_per_epoch: optimisation steps in one epoch.
        should_stop: set by a callback to stop after the current step.
        last_eval: the last evaluation's metrics.
        optimizer: ``param_groups[0]["lr"]`` is the current learning rate.
    """

    cfg: TrainConfig
    should_stop: bool
    last_eval: dict[str, float]
    optimizer: Any

    @property
    def step(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def total_steps(self) -> int: ...

    @property
    def steps_per_epoch(self) -> int: ...

    @property
    def model(self) -> nn.Module: ...

    def state_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class Trainable(TrainerView, Protocol):
    """A trainer that trains one model and can resume: the tensor and the loader trainer (the ensemble trains many
    and resumes none; its members are :class:`TrainerView` s)."""

    def fit(self, steps: int | None = None) -> dict[str, float]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Callback:
    """Subscribe to a trainer's events; every method is optional. Set ``trainer.should_stop`` to stop.

    The one callback type of every engine: given to a trainer, it sees that trainer; given per member of an
    ensemble (run recorders), it sees the member (:class:`~lab.train.ensemble.EnsembleMember`); given to the
    ensemble as a whole (progress, signals), it sees the :class:`~lab.train.ensemble.EnsembleTrainer`, and a
    step's ``loss`` is then ``{member: loss}`` and an evaluation's ``metrics`` ``{member: metrics}``.
    """

    def on_train_start(self, trainer: TrainerView) -> None: ...

    def on_step_end(self, trainer: TrainerView, loss: float) -> None: ...

    def on_eval_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None: ...

    def on_epoch_end(self, trainer: TrainerView) -> None: ...

    def on_checkpoint(self, trainer: TrainerView) -> None:
        """The loader engine's moment to save a checkpoint (every ``train.checkpoint_every`` epochs, on stop and
        at the end); the tensor trainers checkpoint at each evaluation instead."""

    def on_train_end(self, trainer: TrainerView) -> None: ...


def emit(callbacks: Iterable[Callback], trainer: TrainerView, event: str, *args: Any) -> None:
    """Call ``event`` on every subscriber, in order, with ``trainer`` first."""
    for cb in callbacks:
        getattr(cb, event)(trainer, *args)


class Diverged(RuntimeError):
    """The training loss became non-finite; the parameters are those of the last finite step."""

    def __init__(self, step: int, loss: float, hint: str) -> None:
        self.step, self.loss = step, loss
        super().__init__(f"training diverged at step {step}: loss is {loss}. {hint}")


def divergence_hint(cfg: TrainConfig, alpha_min: float | None = None) -> str:
    """The likely causes of a non-finite loss, in the order worth trying."""
    hints = [f"lower the learning rate (train.lr={cfg.lr:g})"]
    if alpha_min is not None and alpha_min < 0.7:
        hints.append(f"raise model.alpha_min ({alpha_min:g}) or set model.zero_init=true")
    return "Likely cause: " + "; or ".join(hints) + "."


def check_finite(metrics: dict[str, float], step: int, loss_key: str, cfg: TrainConfig,
                 alpha_min: float | None = None) -> None:
    """Raise :class:`Diverged` at ``step`` when an evaluation's metric is non-finite (reporting ``loss_key``)."""
    if not all(math.isfinite(v) for v in metrics.values()):
        raise Diverged(step, metrics.get(loss_key, float("nan")), divergence_hint(cfg, alpha_min))


def device_problem(name: str) -> str | None:
    """Why this machine cannot run on the device ``name`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``), or None
    when it can. Asked before a run folder is made: torch would refuse the device only when the model is moved."""
    if name in ("auto", "cpu"):
        return None
    kind, _, index = name.partition(":")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return f"device {name!r} asked for, but CUDA is not available on this machine; use cpu or auto"
        if index and (not index.isdigit() or int(index) >= count):
            return (f"device {name!r} asked for, but this machine has {count} CUDA device{'s' if count > 1 else ''} "
                    f"(cuda:0 to cuda:{count - 1}); use one of them, or auto")
        return None
    if kind == "mps" and not index:
        if not torch.backends.mps.is_available():
            return "device 'mps' asked for, but Apple's Metal (MPS) is not available on this machine; use cpu or auto"
        return None
    return f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps"


def check_device(name: str, key: str = "train.device") -> None:
    """Refuse a device this machine lacks (:func:`device_problem`), naming the setting ``key`` that asked for it.

    Raises:
        ConfigError: the device is unknown or absent here.
    """
    problem = device_problem(name)
    if problem is not None:
        raise ConfigError(f"{key}={name}: {problem}")


def resolve_device(name: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when present, CPU otherwise; anything else must be a device of this machine.

    Raises:
        RuntimeError: the device is unknown or absent here (:func:`device_problem`).
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = device_problem(name)
    if problem is not None:
        raise RuntimeError(problem)
    return torch.device(name)


def machine_cores() -> int:
    """The cores this process may run on (its affinity where the system has one, else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def cpu_threads(threads: int) -> int:
    """The torch threads a CPU run with ``train.threads = threads`` uses: at most the cores this process may run on
    (a config written on a large node, or by someone else, asks for more than a laptop has; 0 keeps torch's
    default, which is already bounded so)."""
    return min(threads, machine_cores())


def use_cpu_threads(device: torch.device, threads: int) -> None:
    """Set torch's process-wide thread count for a run on ``device`` (:func:`cpu_threads`; nothing on a GPU or for
    ``threads = 0``)."""
    if device.type == "cpu" and threads:
        torch.set_num_threads(cpu_threads(threads))


def droppath_mode(cfg: TrainConfig, step: int) -> str:
    """The drop-path mode of optimisation step ``step``: ``droppath``; ResidualDroppath's ``rdp_drop`` on even
    steps and ``rdp_train`` on odd ones (Algorithm 1: M % 2 == 0 drops); or ``off``."""
    if cfg.droppath == "droppath":
        return "droppath"
    if cfg.droppath == "residual_droppath":
        return "rdp_drop" if step % 2 == 0 else "rdp_train"
    return "off"


def drop_paths(model: nn.Module) -> list[DropPath]:
    """The model's :class:`DropPath` modules in module order (the order their masks are drawn and saved in)."""
    return [m for m in model.modules() if isinstance(m, DropPath)]


def batch_schedule(cfg: TrainConfig, n_train: int) -> tuple[int, int, int]:
    """``(batch_size, steps_per_epoch, total_steps)`` of a tensor run on ``n_train`` samples.

    ResidualDroppath drops the last partial batch: its second iteration reuses the first's per-sample mask, so
    the two batches must be the same size.
    """
    batch = min(cfg.batch_size, n_train)
    per_epoch = n_train // batch if cfg.droppath == "residual_droppath" else math.ceil(n_train / batch)
    return batch, per_epoch, run_length(cfg, per_epoch)


def run_length(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """Total steps: ``train.epochs`` epochs, capped by ``train.max_steps`` when set."""
    steps = steps_per_epoch * cfg.epochs
    return min(steps, cfg.max_steps) if cfg.max_steps else steps


def evaluates_after(cfg: TrainConfig, step: int, steps_per_epoch: int) -> bool:
    """Whether the run evaluates once ``step`` steps are done: every ``train.eval_every`` steps, or at each epoch's
    end when that is 0."""
    if cfg.eval_every:
        return step % cfg.eval_every == 0
    return step % steps_per_epoch == 0
