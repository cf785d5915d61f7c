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
from lab.nn.droppath import DropPath, set_droppath_mode
from lab.train.schedule import learning_rate


class Diverged(RuntimeError):
    """The training loss became non-finite; the parameters are those of the last finite step."""

    def __init__(self, step: int, loss: float, hint: str) -> None:
        self.step, self.loss = step, loss
        super().__init__(f"training diverged at step {step}: loss is {loss}. {hint}")


class Callback:
    """Subscribe to a :class:`Trainer`'s events; every method is optional. Set ``trainer.should_stop`` to stop."""

    def on_train_start(self, trainer: Trainer) -> None: ...

    def on_step_end(self, trainer: Trainer, loss: float) -> None: ...

    def on_eval_end(self, trainer: Trainer, metrics: dict[str, float]) -> None: ...

    def on_epoch_end(self, trainer: Trainer) -> None: ...

    def on_checkpoint(self, trainer: Trainer) -> None:
        """The loader engine's moment to save a checkpoint (every ``train.checkpoint_every`` epochs, on stop and
        at the end); the tensor trainers checkpoint at each evaluation instead."""

    def on_train_end(self, trainer: Trainer) -> None: ...


def resolve_device(name: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when present, CPU otherwise; anything else is passed to :class:`torch.device`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asked for, but CUDA is not available on this machine")
    return device


def make_optimizer(params: Iterable[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD (with momentum) from the train config."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def divergence_hint(cfg: TrainConfig, alpha_min: float | None = None) -> str:
    """The likely causes of a non-finite loss, in the order worth trying."""
    hints = [f"lower the learning rate (train.lr={cfg.lr:g})"]
    if alpha_min is not None and alpha_min < 0.7:
        hints.append(f"raise model.alpha_min ({alpha_min:g}) or set model.zero_init=true")
    return "Likely cause: " + "; or ".join(hints) + "."


class Trainer:
    """Minibatch training with cross-entropy, evaluation and callbacks.

    Args:
        model: a classifier ``[B, in] -> [B, C]``; moved to the device.
        data: the train/test split (whole tensors; the toy sets fit on any device).
        cfg: optimisation settings.
        callbacks: subscribers to the training events.
        alpha_min: the model's alpha_min, only to word the divergence message.
    """

    def __init__(self, model: nn.Module, data: ToyData, cfg: TrainConfig, callbacks: Iterable[Callback] = (),
                 alpha_min: float | None = None) -> None:
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        if self.device.type == "cpu" and cfg.threads:
            torch.set_num_threads(cfg.threads)  # process-wide: every toy run in this process shares the bound
        self.model = model.to(self.device)
        self.data = data.to(self.device)
        self.callbacks = list(callbacks)
        self.optimizer = make_optimizer(self.model.parameters(), cfg)
        self.alpha_min = alpha_min
        self.mask_generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.step = 0
        self._perm: tuple[int, torch.Tensor] | None = None  # (epoch, permutation of the training set)
        self._drop_path_modules = self._drop_paths() if cfg.droppath != "off" else []
        self.should_stop = False
        self.last_eval: dict[str, float] = {}
        self.last_eval_step = -1
        n = len(self.data.x_train)
        # ResidualDroppath's second iteration reuses the first's per-sample mask, so batches must be equal-sized.
        self.batch_size = min(cfg.batch_size, n)
        drop_last = cfg.droppath == "residual_droppath"
        self.steps_per_epoch = n // self.batch_size if drop_last else math.ceil(n / self.batch_size)
        steps = self.steps_per_epoch * cfg.epochs
        self.total_steps = min(steps, cfg.max_steps) if cfg.max_steps else steps

    @property
    def epoch(self) -> int:
        """Completed epochs."""
        return self.step // self.steps_per_epoch

    def batch_indices(self, step: int) -> torch.Tensor:
        """Indices of the training batch of global ``step``; a pure function of (train.seed, epoch, step)."""
        epoch, k = divmod(step, self.steps_per_epoch)
        if self._perm is None or self._perm[0] != epoch:
            g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + epoch)
            self._perm = (epoch, torch.randperm(len(self.data.x_train), generator=g).to(self.device))
        return self._perm[1][k * self.batch_size:(k + 1) * self.batch_size]

    def _droppath_mode(self, step: int) -> str:
        if self.cfg.droppath == "droppath":
            return "droppath"
        if self.cfg.droppath == "residual_droppath":
            return "rdp_drop" if step % 2 == 0 else "rdp_train"  # Algorithm 1: M % 2 == 0 drops
        return "off"

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimisation step on ``x [B, in]``, ``y [B]``; returns the loss.

        Raises:
            Diverged: the loss is non-finite; no update was applied.
        """
        if self._drop_path_modules:
            set_droppath_mode(self.model, self._droppath_mode(self.step), self.mask_generator)
        if not self.model.training:  # train() walks every module: ~2 ms per step for the 32-block model
            self.model.train()
        loss = F.cross_entropy(self.model(x), y)
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
        """Loss and accuracy on the train and test sets, in eval mode (no droppath)."""
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
        for cb in self.callbacks:
            getattr(cb, event)(self, *args)

    def _eval_and_emit(self) -> None:
        metrics = self.evaluate()
        if not all(math.isfinite(v) for v in metrics.values()):
            raise Diverged(self.step, metrics.get("train_loss", float("nan")),
                           divergence_hint(self.cfg, self.alpha_min))
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
                epoch_done = self.step % self.steps_per_epoch == 0
                if (self.cfg.eval_every and self.step % self.cfg.eval_every == 0) or (
                        not self.cfg.eval_every and epoch_done):
                    self._eval_and_emit()
                if epoch_done:
                    self._emit("on_epoch_end")
            if self.last_eval_step != self.step:
                self._eval_and_emit()
        finally:  # also after divergence or an error: subscribers close what they opened (bars, lockstep waits)
            self._emit("on_train_end")
        return self.last_eval

    def _drop_paths(self) -> list[DropPath]:
        return [m for m in self.model.modules() if isinstance(m, DropPath)]

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: model, optimizer, step, the droppath mask generator and the last
        ResidualDroppath masks (a run resumed before an odd iteration needs the even iteration's masks)."""
        masks = [dp.mask.cpu() if dp.mask is not None else torch.empty(0) for dp in self._drop_paths()]
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
        for dp, mask in zip(self._drop_paths(), state.get("droppath_masks", []), strict=False):
            dp.mask = mask.to(self.device) if mask.numel() else None
