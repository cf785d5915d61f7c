"""A trainer callback that records a run into its folder: metrics, status heartbeats, checkpoints, TensorBoard.

Checkpoints stay off the training loop: the state is copied between steps (a copy of its tensors costs far less
than serialising and writing it) and written by a thread of its own (:class:`CheckpointWriter`), atomically as
before; ``last`` is written at most every :data:`CHECKPOINT_S` seconds, and always at the end of training (also a
stop, or a SIGTERM turned into a stop). A run killed outright loses at most that much training: it resumes from the
``last`` written before.
"""

from __future__ import annotations

import copy
import math
import secrets
import threading
import time
from typing import Any

import torch

from lab.runfolder import layout
from lab.runfolder.entries import checkpoint_field
from lab.runfolder.layout import Checkpoint, RunState, saved_name
from lab.runfolder.writes import remove_unfinished
from lab.runs.store import Run
from lab.train.checkpoint import save_checkpoint
from lab.train.core import Callback, TrainerView

CHECKPOINT_S = 30.0
"""The most seconds of training between two ``last`` checkpoints of the tensor trainers (the first evaluation's
state is written at once)."""


def copied(state: Any) -> Any:
    """A copy of a checkpoint's state that training cannot change: every tensor cloned, dicts, lists and tuples
    rebuilt (a state dict keeps its version ``_metadata``), any other value deep-copied. Several times cheaper than
    ``copy.deepcopy`` on the many small tensors of a toy model and its optimiser (1 ms against 9 for the spiral
    MLP), which the recorder copies at every evaluation."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        out = type(state)((k, copied(v)) for k, v in state.items())
        if hasattr(state, "_metadata"):
            out._metadata = copy.deepcopy(state._metadata)
        return out
    if type(state) in (list, tuple):
        return type(state)(copied(v) for v in state)
    return copy.deepcopy(state)


class CheckpointWriter:
    """Writes a run's checkpoints in a thread of its own, newest first: a checkpoint submitted while an older one of
    the same name still waits replaces it.

    Args:
        run: the run folder.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self._pending: dict[str, dict[str, Any]] = {}  # checkpoint name → state waiting to be written
        self._lock = threading.Condition()
        self._busy = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, state: dict[str, Any], *names: str) -> None:
        """Write ``state`` (a copy training no longer changes) under ``names``, in the background."""
        with self._lock:
            self._pending.update(dict.fromkeys(names, state))
            if not self._busy:
                self._busy = True
                self._thread = threading.Thread(target=self._write, name=f"lab-checkpoint-{self.run.id}",
                                                daemon=True)
                self._thread.start()

    def _write(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._busy = False
                    self._lock.notify_all()
                    return
                pending, self._pending = self._pending, {}
            by_state: dict[int, tuple[dict[str, Any], list[str]]] = {}
            for name, state in pending.items():
                by_state.setdefault(id(state), (state, []))[1].append(name)
            try:
                for state, names in by_state.values():  # serialised once per state, whatever its names
                    save_checkpoint(self.run, state, *names)
            except BaseException as err:  # a full disk: said at the next flush, on the training thread
                with self._lock:
                    self._error = err

    def flush(self) -> None:
        """Wait until every submitted checkpoint is on disk and the thread that wrote them has ended.

        The thread too, not only its last write: it holds the last checkpoint's tensors until it ends, and a daemon
        thread still in torch's native code when the interpreter exits can abort the process ("terminate called
        without an active exception") after the run has ended well. Once flushed, no writer thread is left.

        Raises:
            OSError: a write failed (the error of the first that did).
        """
        with self._lock:
            while self._busy:
                self._lock.wait()
            error, self._error = self._error, None
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if error is not None:
            raise error


def _saved_best(run: Run) -> float:
    """The accuracy ``best.pt`` was saved with; -inf without one."""
    value = checkpoint_field(run.checkpoint_path(Checkpoint.BEST), "best_acc")
    return float(value) if isinstance(value, (int, float)) else -math.inf


class RunRecorder(Callback):
    """Write what a run does as it does it.

    Step records (``{"kind": "step", "step", "epoch", "loss", "lr", "time"}``; lr is the rate of the step's
    update) every ``train.log_every`` steps; eval
    records (``{"kind": "eval", "step", "epoch", "train_loss", "train_acc", "test_loss", "test_acc", "time"}``)
    after each evaluation, followed by the ``last`` checkpoint (and ``best`` when test accuracy improved, saved with
    that accuracy as ``best_acc``), so a run resumed from ``last`` has every metric up to its step and none after,
    and its best.pt is replaced only by a better model.

    Args:
        run: the run folder.
        tensorboard: also write TensorBoard scalars (``tensorboard --logdir runs``).
        heartbeat_s: minimum seconds between status.json rewrites during training.
        checkpoint_on_eval: checkpoint from evaluations (the tensor trainers: ``best`` when it improved, ``last``
            every ``checkpoint_s`` seconds and at the end, both written in the background); the loader engine says
            when instead (``on_checkpoint``), since an epoch of ImageNet is worth more than one evaluation.
        checkpoint_s: the most seconds of training between two ``last`` checkpoints (:data:`CHECKPOINT_S`).
    """

    def __init__(self, run: Run, *, tensorboard: bool = True, heartbeat_s: float = 1.0,
                 checkpoint_on_eval: bool = True, checkpoint_s: float = CHECKPOINT_S) -> None:
        self.run, self.heartbeat_s, self.checkpoint_on_eval = run, heartbeat_s, checkpoint_on_eval
        self.checkpoint_s = checkpoint_s
        self._last_beat = 0.0
        self.best_acc = -math.inf
        self.tensorboard = tensorboard
        self.writer = None  # made when training starts: until then the recorder has written nothing
        self.checkpoints = CheckpointWriter(run)
        self._candidate: dict[str, Any] | None = None  # the last evaluation's state, not yet written as last
        self._last_written = -math.inf  # when ``last`` was last submitted (monotonic seconds)

    def _status(self, trainer: TrainerView, state: str, message: str = "") -> None:
        self.run.write_status(state, message, step=trainer.step, epoch=trainer.epoch,
                              total_steps=trainer.total_steps, metrics=trainer.last_eval)
        self._last_beat = time.time()

    def on_train_start(self, trainer: TrainerView) -> None:
        for folder in (self.run.path, self.run.path / layout.CHECKPOINTS):  # a killed run's half-written files
            remove_unfinished(folder)
        if self.tensorboard and self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # imported lazily: it is slow to import

            # the event file's name ends in a fresh random suffix: TensorBoard opens it for writing whatever is
            # there, and its usual name (the second, host and process) can be foreseen and planted as a link
            # beforehand by anyone who may write the run folder, whose target the writer would truncate
            self.writer = SummaryWriter(log_dir=str(self.run.path), flush_secs=5,
                                        filename_suffix=f".{secrets.token_hex(16)}")
        # a resumed run's best so far: its metrics (cut back to the checkpoint's step) and the accuracy best.pt was
        # saved with, which an evaluation after the checkpoint (set aside in history/) may have written
        records = self.run.metric_records()
        self.best_acc = max([*(r.get("test_acc", r.get("train_acc", -math.inf)) for r in records
                               if r.get("kind") == "eval"), _saved_best(self.run)])
        self._status(trainer, RunState.RUNNING, f"training from step {trainer.step}")

    def on_step_end(self, trainer: TrainerView, loss: float) -> None:
        if trainer.cfg.save_every and trainer.step % trainer.cfg.save_every == 0:  # kept: the weights alone
            state = trainer.state_dict()
            save_checkpoint(self.run, {k: state[k] for k in ("model", "ema", "step") if k in state},
                            saved_name(trainer.step))
        if trainer.step % trainer.cfg.log_every == 0:
            lr = trainer.optimizer.param_groups[0]["lr"]
            self.run.append_metrics({"kind": "step", "step": trainer.step, "epoch": trainer.epoch, "loss": loss,
                                     "lr": lr, "time": time.time()})
            if self.writer is not None:
                self.writer.add_scalar("train/loss_step", loss, trainer.step)
                self.writer.add_scalar("train/lr", lr, trainer.step)
        if time.time() - self._last_beat >= self.heartbeat_s:
            self._status(trainer, RunState.RUNNING, f"step {trainer.step} of {trainer.total_steps}")

    def on_eval_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        self.run.append_metrics({"kind": "eval", "step": trainer.step, "epoch": trainer.epoch, **metrics,
                                 "time": time.time()})
        if self.writer is not None:
            for key, value in metrics.items():
                split, name = key.split("_", 1) if "_" in key else ("eval", key)
                self.writer.add_scalar(f"{split}/{name}", value, trainer.step)
        acc = metrics.get("test_acc", metrics.get("train_acc", -math.inf))
        best = acc > self.best_acc
        self.best_acc = max(acc, self.best_acc)
        if self.checkpoint_on_eval:  # a copy now, the writing in the background
            # every tensor copied: a snapshot that training can go on changing under
            state = copied({**trainer.state_dict(), "best_acc": self.best_acc})
            due = time.monotonic() - self._last_written >= self.checkpoint_s
            if due:
                self._last_written, self._candidate = time.monotonic(), None
            else:
                self._candidate = state  # written at the end of training unless a later one is
            names = (Checkpoint.LAST,) * due + (Checkpoint.BEST,) * best
            if names:
                self.checkpoints.submit(state, *names)
        elif best:  # the loader engine saves last on its own schedule; best holds the weights just evaluated
            save_checkpoint(self.run, {**trainer.state_dict(), "best_acc": acc}, Checkpoint.BEST)

    def on_checkpoint(self, trainer: TrainerView) -> None:
        """``last`` (the loader engine's schedule: every ``train.checkpoint_every`` epochs and on stop)."""
        save_checkpoint(self.run, trainer.state_dict(), Checkpoint.LAST)

    def on_train_end(self, trainer: TrainerView) -> None:
        """The last evaluation's state becomes ``last`` (after a divergence too: it is the last finite one), and
        every checkpoint is on disk before the run's final status is written."""
        if self._candidate is not None:
            self.checkpoints.submit(self._candidate, Checkpoint.LAST)
            self._candidate, self._last_written = None, time.monotonic()
        self.checkpoints.flush()
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        self.checkpoints.flush()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
