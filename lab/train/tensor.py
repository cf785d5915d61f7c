"""A callback trainer for the toy models: any runner (CLI, background job, notebook) subscribes to its events.

Randomness is split three ways so each can be varied alone: the data seed (points and split, ``data.seed``), the
initialisation seed (``model.seed``, used by :func:`lab.nn.create_model`) and the batch seed (``train.seed``:
batch order and droppath masks). Batch order is a pure function of (train.seed, epoch), so a run resumed from a
checkpoint at step s sees exactly the batches it would have seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lab.config import TrainConfig
from lab.data.toy2d import ToyData
from lab.hooks import eval_mode
from lab.nn.droppath import set_droppath_mode
from lab.seeds import epoch_seed
from lab.train.core import (
    Callback,
    Diverged,
    batch_schedule,
    check_finite,
    divergence_hint,
    drop_paths,
    droppath_mode,
    emit,
    evaluates_after,
    resolve_device,
    use_cpu_threads,
)
from lab.train.optim import make_optimizer
from lab.train.schedule import learning_rate
from lab.train.tasks import PixelTask, pixel_task_metrics


class Trainer:
    """Minibatch training with cross-entropy (or a generative task's loss), evaluation and callbacks.

    Args:
        model: a classifier ``[B, in] -> [B, C]`` (for a task: ``[B, task.in_dim] -> [B, task.out_dim]``); moved
            to the device.
        data: the train/test split (whole tensors; the toy sets fit on any device).
        cfg: optimisation settings.
        callbacks: subscribers to the training events.
        alpha_min: the model's alpha_min, only to word the divergence message.
        task: a generative task on ``data``'s images (:mod:`lab.train.tasks`); None classifies.
    """

    def __init__(self, model: nn.Module, data: ToyData, cfg: TrainConfig, callbacks: Iterable[Callback] = (),
                 alpha_min: float | None = None, task: PixelTask | None = None) -> None:
        self.cfg, self.task = cfg, task
        self.device = resolve_device(cfg.device)
        use_cpu_threads(self.device, cfg.threads)  # process-wide: every toy run in this process shares the bound
        self.model = model.to(self.device)
        self.data = data.to(self.device)
        self.callbacks = list(callbacks)
        self.optimizer = make_optimizer(self.model, cfg)
        self.alpha_min = alpha_min
        self.mask_generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.step = 0
        self._perm: tuple[int, torch.Tensor] | None = None  # (epoch, permutation of the training set)
        self._drop_path_modules = drop_paths(self.model) if cfg.droppath != "off" else []
        self.should_stop = False
        self.last_eval: dict[str, float] = {}
        self.last_eval_step = -1
        self.batch_size, self.steps_per_epoch, self.total_steps = batch_schedule(cfg, len(self.data.x_train))

    @property
    def epoch(self) -> int:
        """Completed epochs."""
        return self.step // self.steps_per_epoch

    def batch_indices(self, step: int) -> torch.Tensor:
        """Indices of the training batch of global ``step``; a pure function of (train.seed, epoch, step)."""
        epoch, k = divmod(step, self.steps_per_epoch)
        if self._perm is None or self._perm[0] != epoch:
            g = torch.Generator().manual_seed(epoch_seed(self.cfg.seed, epoch))
            self._perm = (epoch, torch.randperm(len(self.data.x_train), generator=g).to(self.device))
        return self._perm[1][k * self.batch_size:(k + 1) * self.batch_size]

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimisation step on ``x [B, in]``, ``y [B]``; returns the loss.

        Raises:
            Diverged: the loss is non-finite; no update was applied.
        """
        if self._drop_path_modules:
            set_droppath_mode(self.model, droppath_mode(self.cfg, self.step), self.mask_generator)
        if not self.model.training:  # train() walks every module: ~2 ms per step for the 32-block model
            self.model.train()
        if self.task is None:
            loss = F.cross_entropy(self.model(x), y)
        else:
            inputs, target, weight = self.task.step_draw(x, self.cfg.seed, self.step)
            loss = self.task.loss(self.model(inputs), target, weight)
        value = loss.item()
        if not math.isfinite(value):
            raise Diverged(self.step, value, divergence_hint(self.cfg, self.alpha_min))
        if self.cfg.lr_schedule != "constant" or self.cfg.lr_scaling != "none":
            lr = learning_rate(self.cfg, self.step, self.total_steps, steps_per_epoch=self.steps_per_epoch,
                               batch=self.batch_size)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return value

    @torch.no_grad()
    def evaluate(self, chunk: int = 8192) -> dict[str, float]:
        """Loss and accuracy on the train and test sets, in eval mode (no droppath); for a generative task, its
        loss on each set (:func:`pixel_task_metrics`) and the linear probe of the last layer."""
        if self.task is not None:
            with eval_mode(self.model):
                out = pixel_task_metrics(self.task, self.data, lambda x: self.model(x)[None],
                                         lambda x: self.model.forward_representation(x)[None])[0]
            self.last_eval, self.last_eval_step = out, self.step
            return out
        out: dict[str, float] = {}
        with eval_mode(self.model):
            for split, (x, y) in {"train": (self.data.x_train, self.data.y_train),
                                  "test": (self.data.x_test, self.data.y_test)}.items():
                if len(x) == 0:
                    continue
                loss_sum, correct = 0.0, 0
                for i in range(0, len(x), chunk):
                    logits = self.model(x[i:i + chunk])
                    loss_sum += F.cross_entropy(logits, y[i:i + chunk], reduction="sum").item()
                    correct += (logits.argmax(1) == y[i:i + chunk]).sum().item()
                out[f"{split}_loss"] = loss_sum / len(x)
                out[f"{split}_acc"] = correct / len(x)
        self.last_eval, self.last_eval_step = out, self.step
        return out

    def _emit(self, event: str, *args: Any) -> None:
        emit(self.callbacks, self, event, *args)

    def _eval_and_emit(self) -> None:
        metrics = self.evaluate()
        check_finite(metrics, self.step, "train_loss", self.cfg, self.alpha_min)
        self._emit("on_eval_end", metrics)

    def fit(self, steps: int | None = None) -> dict[str, float]:
        """Train until ``total_steps`` (or ``steps`` more steps), a callback sets ``should_stop``, or divergence.

        Returns:
            The last evaluation's metrics.
        """
        end = self.total_steps if steps is None else min(self.total_steps, self.step + steps)
        self.should_stop = False
        self._emit("on_train_start")
        x_all, y_all = self.data.x_train, self.data.y_train
        try:
            while self.step < end and not self.should_stop:
                idx = self.batch_indices(self.step)
                loss = self.train_step(x_all[idx], y_all[idx])
                self.step += 1
                self._emit("on_step_end", loss)
                if evaluates_after(self.cfg, self.step, self.steps_per_epoch):
                    self._eval_and_emit()
                if self.step % self.steps_per_epoch == 0:
                    self._emit("on_epoch_end")
            if self.last_eval_step != self.step:
                self._eval_and_emit()
        finally:  # also after divergence or an error: subscribers close what they opened (bars, lockstep waits)
            self._emit("on_train_end")
        return self.last_eval

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: model, optimizer, step, the droppath mask generator and the last
        ResidualDroppath masks (a run resumed before an odd iteration needs the even iteration's masks)."""
        masks = [dp.mask.cpu() if dp.mask is not None else torch.empty(0) for dp in drop_paths(self.model)]
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
                "mask_generator": self.mask_generator.get_state(), "droppath_masks": masks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the config's rate, not the saved one: a resume may lower it
            group["lr"] = self.cfg.lr
        self.step = int(state["step"])
        self.mask_generator.set_state(state["mask_generator"])
        for dp, mask in zip(drop_paths(self.model), state.get("droppath_masks", []), strict=False):
            dp.mask = mask.to(self.device) if mask.numel() else None
