"""Samples of a diffusion run's checkpoint: a PNG grid and the samples themselves, under ``<run>/analysis/``.

The model is rebuilt from the run's config and loaded from a checkpoint (``weights_only=True``), with the weights'
moving average when the run kept one (as U-ViT samples with its EMA model). The initial noise comes from ``seed``,
so the same command gives the same samples, and two checkpoints of a run can be compared on the same noise.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from lab.config import ExperimentConfig
from lab.nn.diffusion import SCHEDULE_SAMPLERS
from lab.reports.alignment import load_trained
from lab.runs import layout
from lab.runs.store import Run, atomic_write_bytes, config_of_run
from lab.train.build import sample_decoder
from lab.train.core import resolve_device
from lab.train.pretrain_eval import grid_png


class Drawn(NamedTuple):
    """Samples of a diffusion run's checkpoint (:func:`draw_samples`)."""

    images: torch.Tensor  # [num, C, H, W] float32 on the CPU, in the training data's scale (a VAE's: decoded)
    labels: torch.Tensor | None  # [num] the classes asked for, None for an unconditional model
    config: ExperimentConfig  # the run's
    step: int  # the checkpoint's
    weights: str  # "ema" or "model"
    sampler: str  # the sampler that drew them


def draw_samples(run: Run, *, num: int = 64, steps: int = 50, sampler: str | None = None, guidance: float = 0.0,
                 checkpoint: str = "last", ema: bool | None = None, seed: int = 0, batch_size: int = 256,
                 device: str = "auto", progress: bool = True) -> Drawn:
    """Draw ``num`` samples from a diffusion run's checkpoint.

    Args:
        run: a run of ``train.task=diffusion``.
        num: how many samples (a conditional model cycles through its classes: 0, 1, 2, …).
        steps: sampler steps.
        sampler: on the VP-SDE ``ode`` (probability flow, Euler) or ``sde`` (Euler–Maruyama, the reference's FID
            sampler); on the discrete schedule ``dpm_solver``; None: the run's ``train.sampler``.
        guidance: classifier-free guidance scale w: ε̃ = (1 + w) ε(x, y) − w ε(x, ∅) (class-conditional runs).
        checkpoint: ``last`` or ``best``.
        ema: sample with the weights' moving average; None: when the run kept one.
        seed: the initial noise (and the SDE's noise).
        batch_size: samples drawn at once.
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda[:i]``.
        progress: show a progress bar.

    Raises:
        ValueError: not a diffusion run, or a setting out of range.
        CheckpointError: the checkpoint is missing, corrupt, or has no moving average when ``ema=True``.
    """
    if num < 1 or steps < 1 or batch_size < 1 or guidance < 0:
        raise ValueError(f"need num, steps and batch_size >= 1 and guidance >= 0; got num={num}, steps={steps}, "
                         f"batch_size={batch_size}, guidance={guidance}")
    cfg = config_of_run(run)
    if cfg.train.task != "diffusion":
        raise ValueError(f"{run.path.name} trained train.task={cfg.train.task}: only diffusion runs sample images")
    sampler, schedule = sampler or cfg.train.sampler, cfg.model.get("schedule")
    if sampler not in SCHEDULE_SAMPLERS[schedule]:
        raise ValueError(f"sampler {sampler!r} does not sample this run's {schedule} schedule; valid: "
                         f"{', '.join(SCHEDULE_SAMPLERS[schedule])}")
    if ema is None:
        ema = cfg.train.ema > 0
    try:
        dev = resolve_device(device)
    except RuntimeError as err:
        raise ValueError(f"device {device!r}: {err}") from None
    weights = "ema" if ema else "model"
    _, model, _, step = load_trained(run, checkpoint, loader=True, weights=weights)
    if guidance and (not model.conditional or model.net.null_class is None):
        raise ValueError("--guidance needs a class-conditional run trained with label dropout (model.num_classes "
                         "> 0, model.p_uncond > 0)")
    model.to(dev)
    decode = sample_decoder(cfg)  # latents back to images; None for a model of pixels
    generator = torch.Generator(device=dev).manual_seed(seed)
    labels = (torch.arange(num) % model.net.num_classes) if model.conditional else None
    chunks = []
    with tqdm(total=num, desc="sampling", unit="img", disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, num, batch_size):
            n = min(batch_size, num - start)
            y = labels[start:start + n].to(dev) if labels is not None else None
            drawn = model.sample(n, steps=steps, sampler=sampler, y=y, guidance=guidance, generator=generator,
                                 device=dev)
            chunks.append((decode(drawn) if decode is not None else drawn).float().cpu())
            bar.update(n)
    return Drawn(torch.cat(chunks), labels, cfg, step, weights, sampler)


def sample_report(run: Run, *, num: int = 64, steps: int = 50, sampler: str | None = None, guidance: float = 0.0,
                  checkpoint: str = "last", ema: bool | None = None, seed: int = 0, batch_size: int = 256,
                  device: str = "auto", progress: bool = True) -> dict[str, Any]:
    """:func:`draw_samples` (its arguments), written as ``analysis/samples-<step>-<settings>.png`` and ``.npz``.

    Returns:
        ``{"png", "npz"}`` paths and the settings: ``step``, ``num``, ``steps``, ``sampler``, ``guidance``,
        ``weights``, ``seed``. The ``.npz`` holds ``samples [num, C, H, W]`` float32 in the training data's scale
        (standardised as the model saw it) and ``labels [num]`` (−1 for an unconditional model).
    """
    drawn = draw_samples(run, num=num, steps=steps, sampler=sampler, guidance=guidance, checkpoint=checkpoint,
                         ema=ema, seed=seed, batch_size=batch_size, device=device, progress=progress)
    settings = f"{drawn.sampler}{steps}" + (f"-w{guidance:g}" if guidance else "") + f"-{drawn.weights}-seed{seed}"
    folder = run.path / layout.ANALYSIS
    png, npz = (folder / f"samples-{drawn.step}-{settings}.{ext}" for ext in ("png", "npz"))
    atomic_write_bytes(png, grid_png(drawn.images))
    buffer = io.BytesIO()
    labels = drawn.labels if drawn.labels is not None else torch.full((num,), -1)
    np.savez_compressed(buffer, samples=drawn.images.numpy(), labels=labels.numpy())
    atomic_write_bytes(npz, buffer.getvalue())
    return {"png": png, "npz": npz, "step": drawn.step, "num": num, "steps": steps, "sampler": drawn.sampler,
            "guidance": guidance, "weights": drawn.weights, "seed": seed}


def format_samples(summary: dict[str, Any]) -> str:
    """One line for the command line."""
    guided = f", guidance {summary['guidance']:g}" if summary["guidance"] else ""
    return (f"{summary['num']} samples of step {summary['step']} ({summary['sampler']} sampler, {summary['steps']} "
            f"steps{guided}, {summary['weights']} weights, seed {summary['seed']}): {Path(summary['png']).name}")
