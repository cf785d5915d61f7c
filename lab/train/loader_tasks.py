"""What each task adds to the loader engine: its loss, its held-out evaluation and what rank 0 measures and draws.

The engine (:class:`~lab.train.loader.LoaderTrainer`) owns the step, the schedule, the processes and the loop; a task
owns what differs between a classifier (logits against labels, accuracy), a masked autoencoder (its forward returns
the loss; the bottleneck's rank, reconstructions and quick probes) and a diffusion model (a loss at a drawn noise
level; sample grids, digits-FD and probes over noise level and block). :data:`LOADER_TASKS` maps
``train.task`` to its task; a registered model names the task its forward serves
(:func:`lab.nn.registry.model_info`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lab.hooks import eval_mode
from lab.runfolder import layout
from lab.runfolder.writes import atomic_write_json
from lab.train import pretrain_eval

if TYPE_CHECKING:
    from lab.train.loader import LoaderTrainer


class LoaderTask:
    """A task of the loader engine; every method but :meth:`loss` and :meth:`evaluate_batch` defaults to nothing."""

    name: ClassVar[str]

    def prepare(self, trainer: LoaderTrainer) -> None:
        """Set up what the evaluations measure, on rank 0 once the trainer is built."""

    def loss(self, trainer: LoaderTrainer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The training loss of a micro-batch, through ``trainer.forward`` (DDP, compiled)."""
        raise NotImplementedError

    def evaluate_batch(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
                       sums: list[float]) -> None:
        """Add a held-out batch to ``sums``: loss sum, top-1 hits, top-5 hits (the engine counts the samples);
        ``generator`` draws the same masks or noise at every evaluation."""
        raise NotImplementedError

    def metrics(self, top1: float, top5: float) -> dict[str, float]:
        """The held-out metrics besides the loss, from the hit rates."""
        return {}

    def measures(self, trainer: LoaderTrainer) -> dict[str, float]:
        """What rank 0 measures (and draws into the run folder) at each evaluation."""
        return {}


class Classify(LoaderTask):
    """Logits against labels: cross-entropy (or timm's label smoothing) to train, top-1 and top-5 to evaluate."""

    name: ClassVar[str] = "classify"

    def loss(self, trainer: LoaderTrainer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return trainer.criterion(trainer.forward(x), y)

    def evaluate_batch(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
                       sums: list[float]) -> None:
        logits = model(x).float()
        sums[0] += F.cross_entropy(logits, y, reduction="sum").item()
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices
        sums[1] += (top[:, 0] == y).sum().item()
        sums[2] += (top == y[:, None]).any(1).sum().item()

    def metrics(self, top1: float, top5: float) -> dict[str, float]:
        return {"test_acc": top1, "test_top5": top5}


class MaskedAutoencoder(LoaderTask):
    """A model whose forward returns ``(loss, …)`` for masked images: the loss to train and evaluate (the same masks
    at every evaluation); on rank 0 the bottleneck's rank and a reconstruction picture of fixed held-out images, and
    every ``train.probe_every`` epochs a quick linear probe (Figure 6 and Figure 8 of *Residual Connections Harm
    Generative Representation Learning*, from the run folder)."""

    name: ClassVar[str] = "mae"

    def __init__(self) -> None:
        self.fixed = torch.empty(0)

    def prepare(self, trainer: LoaderTrainer) -> None:
        """``train.rank_inputs`` held-out images in the fixed shuffled order of
        :func:`~lab.train.pretrain_eval.features` (an image folder lists its files class by class)."""
        test, n = trainer.data.test, min(trainer.cfg.rank_inputs, len(trainer.data.test))
        order = torch.randperm(len(test), generator=torch.Generator().manual_seed(0))[:n]
        self.fixed = torch.stack([test[i][0] for i in order.tolist()]) if n else torch.empty(0)

    def loss(self, trainer: LoaderTrainer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return trainer.forward(x)[0]

    def evaluate_batch(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
                       sums: list[float]) -> None:
        sums[0] += model(x, generator=generator)[0].float().item() * len(x)

    def measures(self, trainer: LoaderTrainer) -> dict[str, float]:
        out: dict[str, float] = {}
        model, device = trainer.model, trainer.device
        if len(self.fixed) >= 2:
            with eval_mode(model), trainer.autocast():
                feats = model.forward_features(self.fixed.to(device)).float()
            out.update(pretrain_eval.bottleneck_rank(feats))
            if trainer.figure_path is not None:
                pretrain_eval.save_reconstruction(model, self.fixed[:8].to(device),
                                                  trainer.figure_path(layout.RECONSTRUCTION, trainer.step, ".png"),
                                                  seed=trainer.cfg.seed)
        if trainer.probes_now():
            train, test = (pretrain_eval.features(model, d, limit=trainer.cfg.probe_samples or 5000, device=device,
                                                  workers=trainer.workers)
                           for d in (trainer.data.train_eval, trainer.data.test))
            with torch.enable_grad():  # the probe trains its head (evaluate runs without gradients)
                out.update(pretrain_eval.quick_probe(train, test, trainer.data.num_classes, seed=trainer.cfg.seed))
        return out


class Diffusion(LoaderTask):
    """A model whose forward ``(x, y)`` draws a noise level and returns ``(loss, …)``: the loss to train and evaluate
    (the same levels and noise at every evaluation); on rank 0 a grid of samples, with ``train.fd_samples`` the
    digits-FD of that many samples, and every ``train.probe_every`` epochs linear probes over (noise level, block) —
    all with the weights' moving average when there is one."""

    name: ClassVar[str] = "diffusion"

    def loss(self, trainer: LoaderTrainer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return trainer.forward(x, y)[0]

    def evaluate_batch(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
                       sums: list[float]) -> None:
        sums[0] += model(x, y, generator=generator)[0].float().item() * len(x)

    def measures(self, trainer: LoaderTrainer) -> dict[str, float]:
        cfg, data, step = trainer.cfg, trainer.data, trainer.step
        model = trainer.ema.module if trainer.ema is not None else trainer.model
        out: dict[str, float] = {}
        drawing = {"steps": cfg.sample_steps, "sampler": cfg.sampler, "device": trainer.device}
        with trainer.autocast():
            if trainer.figure_path is not None and cfg.samples:
                pretrain_eval.save_samples(model, trainer.figure_path(layout.SAMPLES, step, ".png"), num=cfg.samples,
                                           seed=cfg.seed, decode=data.decode, **drawing)
            if data.judge is not None:  # other noise than the grid's: it is not measured on what it shows
                drawn = pretrain_eval.draw(model, cfg.fd_samples, seed=cfg.seed + 1, **drawing)
                out["digits_fd"] = data.judge(drawn)
        if not trainer.probes_now():
            return out
        train, test = (pretrain_eval.diffusion_features(model, d, limit=cfg.probe_samples or 2000, seed=cfg.seed,
                                                        device=trainer.device, workers=trainer.workers)
                       for d in (data.train_eval, data.test))
        with torch.enable_grad():
            grid = pretrain_eval.probe_grid(train, test, data.num_classes, seed=cfg.seed)
        if trainer.figure_path is not None:  # written whole: a reader never sees half a grid
            atomic_write_json(trainer.figure_path(layout.PROBE_FIGURE, step, ".json"),
                              {"step": step, "times": list(pretrain_eval.PROBE_TIMES), "accuracy": grid.tolist()})
        return {**out, **pretrain_eval.best_cell(grid)}


LOADER_TASKS: dict[str, type[LoaderTask]] = {t.name: t for t in (Classify, MaskedAutoencoder, Diffusion)}
"""``train.task`` → the loader engine's task."""
