"""The loader engine: training from a DataLoader, on one device or data-parallel under ``torchrun``.

The tensor trainer (:mod:`lab.train.tensor`) holds a whole data set as tensors, which suits the toy sets and the
small image sets the pages train live. Full-scale runs — MAE pretraining of *Residual Connections Harm Generative
Representation Learning* on ImageNet, ResNet50/50d with *ResidualDroppath: Enhancing Feature Reuse over Residual
Connections* — stream images from disk through worker processes into DDP replicas:

- one optimisation step = ``train.accum_steps`` micro-batches of ``train.batch_size`` on each process (gradients
  synchronised on the last one only); global batch = batch_size × accum_steps × processes;
- the learning rate per step from :func:`lab.train.schedule.learning_rate`, its peak ``train.lr`` × global batch
  / 256 with ``train.lr_scaling=batch256`` (MAE's rule), warmup ``warmup_steps + warmup_epochs`` × steps/epoch;
- weight decay as every trainer applies it (:mod:`lab.train.optim`): by default it spares norms and biases, and
  what a model's ``no_weight_decay()`` names (timm's ``param_groups_weight_decay``); the MAE's cls and mask tokens
  are decayed, as in the reference MAE code, and its position embeddings are fixed;
- classifiers train on cross-entropy, or timm's ``LabelSmoothingCrossEntropy`` with ``train.label_smoothing``
  (evaluation reports the plain cross-entropy); generative models (task ``mae``, ``diffusion``) compute their own
  loss, a diffusion model from the images and their labels;
- with ``train.ema``, an exponential moving average of the weights (timm's ``ModelEmaV3``) follows every update
  and is checkpointed with them; a diffusion model draws its sample grids with it, as U-ViT does;
- bf16 autocast on CUDA (``train.precision``), ``torch.compile`` as an option;
- every random draw of a step (crops, masks, drop paths) is a function of (seed, step, rank), so a run stopped and
  resumed continues exactly as it would have gone on;
- a stop request (``STOP`` file, SIGTERM) seen by any process stops every process after the same step; the last
  checkpoint is written then, every ``train.checkpoint_every`` epochs and at the end (by rank 0, atomically).

Callbacks are :class:`lab.train.core.Callback` s, so the run recorder, the progress bar and the stop checks of
the tensor trainer serve here unchanged; the ones that write run on rank 0 only.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from lab.config import DataConfig, TrainConfig
from lab.data.keyed import KeyedSampler, ShardSampler
from lab.nn.droppath import set_droppath_mode
from lab.seeds import step_seed
from lab.train.core import (
    Callback,
    Diverged,
    check_finite,
    divergence_hint,
    drop_paths,
    droppath_mode,
    emit,
    evaluates_after,
    run_length,
    use_cpu_threads,
)
from lab.train.distributed import World, any_rank, sum_all
from lab.train.loader_tasks import LOADER_TASKS
from lab.train.optim import make_optimizer
from lab.train.schedule import learning_rate, peak_lr, warmup_steps


@dataclass(frozen=True)
class LoaderData:
    """The data sets of a loader run.

    Attributes:
        train: training samples, keyed ``(epoch, index)``, augmented.
        test: held-out samples, not augmented.
        train_eval: the training samples without augmentation (for probes).
        num_classes: number of classes.
        image_shape: ``(C, H, W)`` of one input.
        decode: a generative model's samples → images, when the inputs are not images (a VAE's latents,
            :mod:`lab.data.latents`); None when they are.
        judge: a generative model's samples → their digits-FD from the training digits
            (:func:`lab.analysis.frechet.digits_fd`), for a run that measures it (``train.fd_samples``); else None.
    """

    train: Dataset
    test: Dataset
    train_eval: Dataset
    num_classes: int
    image_shape: tuple[int, ...]
    decode: Callable[[torch.Tensor], torch.Tensor] | None = None
    judge: Callable[[torch.Tensor], float] | None = None


def ignore_stop_signals(worker_id: int) -> None:
    """A loader worker ignores SIGTERM and SIGINT: ``torchrun`` and cluster schedulers signal a training process's
    whole process group, and a worker killed mid-epoch would fail the run instead of letting it stop cleanly
    (the training process stops the workers itself)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ResumeMismatch(ValueError):
    """A checkpoint was written with another global batch or epoch length than this run would have: continuing
    would silently change its schedule; the message says what to set."""


def micro_batch(cfg: TrainConfig, processes: int) -> int:
    """Samples per process in one micro-batch: ``train.batch_size``, or, with ``train.global_batch`` set, the global
    batch divided among the micro-batches and processes (so a recipe's global batch holds on any number of GPUs).

    Raises:
        ValueError: the global batch does not divide into ``train.accum_steps`` × ``processes`` equal parts.
    """
    if not cfg.global_batch:
        return cfg.batch_size
    share, rest = divmod(cfg.global_batch, cfg.accum_steps * processes)
    if rest or not share:
        raise ValueError(f"train.global_batch={cfg.global_batch} does not divide into {cfg.accum_steps} "
                         f"micro-batch(es) × {processes} process(es); choose a process count or train.accum_steps "
                         "that divides it")
    return share


class LoaderTrainer:
    """Train ``model`` on ``data`` with ``cfg`` as one process of ``world``.

    Args:
        model: a classifier ``[B, C, H, W] -> [B, classes]`` (task ``classify``) or a model whose forward returns
            ``(loss, …)``: ``model(x)`` (task ``mae``), ``model(x, y)`` (task ``diffusion``); moved to the world's
            device.
        data: the data sets.
        cfg: the train section.
        data_cfg: the data section (loader workers).
        world: this process among the data-parallel processes.
        callbacks: subscribers: those that write (the run recorder, a progress bar) on rank 0 only; stop checks on
            every rank (a stop any rank sees stops all).
        alpha_min: the model's alpha_min, only to word the divergence message.
        figure_path: where the evaluation figure ``(kind, step, suffix)`` goes — reconstruction pictures (MAE),
            sample grids and probe grids (diffusion), written by rank 0 (the run folder names them:
            :meth:`~lab.runs.store.Run.figure_path`); None for none.
    """

    def __init__(self, model: nn.Module, data: LoaderData, cfg: TrainConfig, data_cfg: DataConfig, world: World,
                 callbacks: Iterable[Callback] = (), alpha_min: float | None = None,
                 figure_path: Callable[[str, int, str], Path] | None = None) -> None:
        self.cfg, self.world, self.data = cfg, world, data
        self.device = world.device
        use_cpu_threads(self.device, cfg.threads)
        self.model = model.to(self.device)
        self.callbacks = list(callbacks)
        self.alpha_min, self.figure_path = alpha_min, figure_path
        # every parameter takes part in every step (ResidualDroppath's odd step keeps the kept branches in the graph
        # through F(x)·(1 − mask)), so DDP needs no search for unused parameters
        self.ddp = (DistributedDataParallel(self.model, device_ids=[self.device] if self.device.type == "cuda"
                                            else None) if world.distributed else None)
        runner = self.ddp if self.ddp is not None else self.model
        self.forward = torch.compile(runner) if cfg.compile else runner
        self.optimizer = make_optimizer(self.model, cfg)
        self.ema = None
        if cfg.ema > 0:
            from timm.utils import ModelEmaV3  # imported here: timm takes seconds to import

            self.ema = ModelEmaV3(self.model, decay=cfg.ema)
        self.criterion = F.cross_entropy
        if cfg.label_smoothing > 0:  # timm's own loss, as its training script builds it
            from timm.loss import LabelSmoothingCrossEntropy

            self.criterion = LabelSmoothingCrossEntropy(smoothing=cfg.label_smoothing)
        self.bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and self.device.type == "cuda")
        self.mask_generator = torch.Generator(device=self.device)
        self.batch_size = micro_batch(cfg, world.size)
        self.sampler = KeyedSampler(len(data.train), self.batch_size, world.rank, world.size, cfg.seed)
        self.workers = data_cfg.workers
        self.loader = DataLoader(data.train, batch_size=self.batch_size, sampler=self.sampler,
                                 num_workers=self.workers, pin_memory=self.device.type == "cuda",
                                 persistent_workers=self.workers > 0, drop_last=True,
                                 worker_init_fn=ignore_stop_signals)
        self.steps_per_epoch = self.sampler.batches // cfg.accum_steps
        if self.steps_per_epoch == 0:
            raise ValueError(f"an epoch holds {self.sampler.batches} micro-batches per process, fewer than "
                             f"train.accum_steps={cfg.accum_steps}")
        self.total_steps = run_length(cfg, self.steps_per_epoch)
        self.global_batch = self.batch_size * cfg.accum_steps * world.size
        self.peak_lr = peak_lr(cfg, self.global_batch)
        self.warmup = warmup_steps(cfg, self.steps_per_epoch)
        if cfg.min_lr > self.peak_lr:
            raise ValueError(f"train.min_lr ({cfg.min_lr:g}) exceeds the peak learning rate {self.peak_lr:g} (train.lr "
                             f"{cfg.lr:g} × global batch {self.global_batch} / 256): the cosine would rise")
        self.step = 0
        self.should_stop = False
        self.last_eval: dict[str, float] = {}
        self.last_eval_step = -1
        self._losses: list[float] = []  # training losses since the last evaluation
        self._images = 0  # images seen since the last throughput record
        self.throughput: float | None = None  # images/s over the last log_every steps
        self.task = LOADER_TASKS[cfg.task]()
        if world.main:  # what evaluations measure is measured by rank 0 alone (MAE: the others decode no images)
            self.task.prepare(self)

    # -- the step ---------------------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """Completed epochs."""
        return self.step // self.steps_per_epoch

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast where the run asks for it (``train.precision``), else nothing."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            return self.task.loss(self, x, y)

    def train_step(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """One optimisation step on this process's micro-batches; returns the loss averaged over all processes.

        Raises:
            Diverged: the loss is non-finite on some process; no update was applied.
        """
        seed = step_seed(self.cfg.seed, self.step, self.world.rank)
        torch.manual_seed(seed)  # MAE masks and any dropout: a function of (seed, step, rank)
        if self.cfg.droppath != "off":
            self.mask_generator.manual_seed(seed)
            set_droppath_mode(self.model, droppath_mode(self.cfg, self.step), self.mask_generator)
        self.model.train()
        lr = learning_rate(self.cfg, self.step, self.total_steps, steps_per_epoch=self.steps_per_epoch,
                           batch=self.global_batch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        total = 0.0
        for j, (x, y) in enumerate(batches):
            last = j == len(batches) - 1
            sync = contextlib.nullcontext() if self.ddp is None or last else self.ddp.no_sync()
            with sync:
                loss = self._loss(x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))
                (loss / len(batches)).backward()
            total += loss.item() / len(batches)
        value = sum_all(self.world, [total])[0] / self.world.size
        if not math.isfinite(value):
            self.optimizer.zero_grad(set_to_none=True)
            raise Diverged(self.step, value, divergence_hint(self.cfg, self.alpha_min))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model)
        return value

    def _batches(self) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Groups of ``accum_steps`` micro-batches from the current step on, epoch after epoch."""
        while True:
            epoch, k = divmod(self.step, self.steps_per_epoch)
            self.sampler.set_epoch(epoch, k * self.cfg.accum_steps)
            group: list[tuple[torch.Tensor, torch.Tensor]] = []
            for batch in self.loader:
                group.append(batch)
                if len(group) == self.cfg.accum_steps:
                    yield group
                    group = []
                    if self.step % self.steps_per_epoch == 0:
                        break  # an epoch's worth of whole steps: the rest of the loader is the dropped remainder

    # -- the loop ---------------------------------------------------------------------------------------------
    def _emit(self, event: str, *args: Any) -> None:
        emit(self.callbacks, self, event, *args)

    def fit(self, steps: int | None = None) -> dict[str, float]:
        """Train until ``total_steps`` (or ``steps`` more), a stop request on any process, or divergence.

        Returns:
            The last evaluation's metrics (rank 0; other ranks get the same dict without rank-0-only entries).
        """
        end = self.total_steps if steps is None else min(self.total_steps, self.step + steps)
        self.should_stop = False
        self._emit("on_train_start")
        tick = time.perf_counter()
        saved = -1  # the step of the last checkpoint written in this call
        try:
            batches = self._batches()
            while self.step < end:
                group = next(batches)
                loss = self.train_step(group)
                self._losses.append(loss)
                self._images += self.global_batch
                self.step += 1
                self._emit("on_step_end", loss)
                if self.step % self.cfg.log_every == 0:
                    now = time.perf_counter()
                    self.throughput = self._images / (now - tick)
                    tick, self._images = now, 0
                # a stop (STOP file, SIGTERM) skips what is left of the step's work: a scheduler's grace period
                # after SIGTERM is short, and the checkpoint below must be written within it
                if any_rank(self.world, self.should_stop):
                    self.should_stop = True
                    break
                epoch_done = self.step % self.steps_per_epoch == 0
                if epoch_done and self.epoch % self.cfg.checkpoint_every == 0:
                    self._emit("on_checkpoint")  # before evaluating: the epoch is kept however long that takes
                    saved = self.step
                if evaluates_after(self.cfg, self.step, self.steps_per_epoch):
                    self._eval_and_emit()
                if epoch_done:
                    self._emit("on_epoch_end")
            if not self.should_stop and self.last_eval_step != self.step:
                self._eval_and_emit()
            if saved != self.step:
                self._emit("on_checkpoint")  # stopped, or ended between checkpoints: keep where it got to
        finally:
            self._emit("on_train_end")
        return self.last_eval

    # -- evaluation -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out loss (and top-1/top-5 accuracy for classifiers) over every test sample, shared among the
        processes; for MAE on rank 0 also the bottleneck rank, the reconstruction picture and, at epoch ends
        every ``train.probe_every`` epochs, a quick probe; for diffusion on rank 0 a grid of samples. The
        generative losses are drawn with the same masks, noise levels and noise at every evaluation, so they
        compare over training. ``train_loss`` is the mean training loss since the previous evaluation."""
        out: dict[str, float] = {}
        if self._losses:
            out["train_loss"] = sum(self._losses) / len(self._losses)
            self._losses = []
        loader = DataLoader(self.data.test, batch_size=self.batch_size, num_workers=self.workers,
                            sampler=ShardSampler(len(self.data.test), self.world.rank, self.world.size),
                            pin_memory=self.device.type == "cuda", worker_init_fn=ignore_stop_signals)
        sums = [0.0, 0.0, 0.0, 0.0]  # loss sum, top-1 hits, top-5 hits, count
        if self.world.distributed:  # BatchNorm statistics drift apart on each process: evaluate rank 0's everywhere
            for buffer in self.model.buffers():
                torch.distributed.broadcast(buffer, src=0)
        generator = torch.Generator(device=self.device).manual_seed(self.cfg.seed)  # the same MAE masks each time
        self.model.eval()  # not eval_mode: that also turns fused attention off, which analyses need, not this loop
        with self.autocast():
            for x, y in loader:
                x, y = x.to(self.device), y.to(self.device)
                self.task.evaluate_batch(self.model, x, y, generator, sums)
                sums[3] += len(x)
        loss, top1, top5, n = sum_all(self.world, sums)
        if n:
            out["test_loss"] = loss / n
            out.update(self.task.metrics(top1 / n, top5 / n))
        if self.world.main:
            out.update(self.task.measures(self))
        if self.throughput is not None:
            out["train_images_per_s"] = self.throughput
        self.last_eval, self.last_eval_step = out, self.step
        return out

    def probes_now(self) -> bool:
        """Whether this evaluation ends an epoch on which ``train.probe_every`` asks for a quick probe."""
        epoch_end = self.step % self.steps_per_epoch == 0
        return bool(self.cfg.probe_every) and epoch_end and self.epoch % self.cfg.probe_every == 0

    def _eval_and_emit(self) -> None:
        metrics = self.evaluate()
        check_finite(metrics, self.step, "test_loss", self.cfg, self.alpha_min)
        self._emit("on_eval_end", metrics)

    # -- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer, step, the weights' moving average (``train.ema``), and the last ResidualDroppath masks
        (a run resumed before an odd step needs the even step's)."""
        masks = [dp.mask.cpu() if dp.mask is not None else torch.empty(0) for dp in drop_paths(self.model)]
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
                 "droppath_masks": masks, "global_batch": self.global_batch, "steps_per_epoch": self.steps_per_epoch}
        if self.ema is not None:
            state["ema"] = self.ema.module.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved.

        Raises:
            ResumeMismatch: the checkpoint's global batch or steps per epoch differ from this run's (another number
                of processes, batch size or accumulation): the schedule would change under it.
        """
        saved = (state.get("global_batch", self.global_batch), state.get("steps_per_epoch", self.steps_per_epoch))
        if saved != (self.global_batch, self.steps_per_epoch):
            processes, rest = divmod(saved[0], self.batch_size * self.cfg.accum_steps)
            if self.cfg.global_batch:  # the per-process batch follows the processes: the global one is what counts
                processes, rest = 0, 1
            hint = (f" Resume it with {processes} process(es) (torchrun --nproc_per_node={processes} -m lab resume …)."
                    if processes and not rest else "")
            raise ResumeMismatch(
                f"this run was trained with a global batch of {saved[0]} ({saved[1]} steps per epoch); resuming with "
                f"{self.world.size} process(es) gives {self.global_batch} ({self.steps_per_epoch} steps per epoch), "
                f"which would change its schedule.{hint}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.ema is not None:  # a checkpoint written without an average starts one from its weights
            self.ema.module.load_state_dict(state.get("ema", state["model"]))
        self.step = int(state["step"])
        for dp, mask in zip(drop_paths(self.model), state.get("droppath_masks", []), strict=False):
            dp.mask = mask.to(self.device) if mask.numel() else None
