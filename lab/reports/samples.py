"""Samples of a diffusion run's checkpoint: a PNG grid and the samples themselves, under ``<run>/analysis/``.

The model is rebuilt from the run's config and loaded from a checkpoint (``weights_only=True``), with the weights'
moving average when the run kept one (as U-ViT samples with its EMA model). The initial noise comes from ``seed``,
so the same command gives the same samples, and two checkpoints of a run can be compared on the same noise.

Requests are bounded before anything is drawn (:func:`check_request`: at most :data:`MAX_SAMPLES` samples,
:data:`MAX_STEPS` sampler steps, a finite guidance scale), the refusal saying what the request would cost; samples
are drawn a batch at a time (:func:`sample_batches`) and written to disk as they come, so a large request never
holds them all in memory.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from lab.config import ExperimentConfig, config_of_run
from lab.nn.diffusion import SCHEDULE_SAMPLERS
from lab.reports.alignment import load_trained
from lab.runfolder import layout
from lab.runfolder.entries import size_text
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_path, atomic_write_bytes
from lab.runs.store import Run
from lab.train.build import sample_decoder
from lab.train.core import resolve_device
from lab.train.pretrain_eval import grid_png

MAX_SAMPLES = 100_000
"""The most samples one command draws (the reference's FID takes 50,000)."""
MAX_STEPS = 10_000
"""The most sampler steps (the reference's Euler–Maruyama FID sampler takes 1,000)."""
MAX_GUIDANCE = 100.0
"""The largest classifier-free guidance scale (useful scales are a few units)."""
MAX_BATCH = 8192
GRID_MAX = 256
"""The sample grid shows at most this many samples (the first ones)."""


def check_request(num: int, steps: int, guidance: float, batch_size: int,
                  image_shape: tuple[int, ...] | None = None) -> None:
    """Refuse a sampling request out of bounds, saying what it would cost.

    Args:
        num, steps, guidance, batch_size: the request.
        image_shape: ``(C, H, W)`` of one sample, to name the request's size.

    Raises:
        ValueError: a count below 1 or above its bound, or a guidance scale that is negative, not finite or above
            :data:`MAX_GUIDANCE`.
    """
    problems = []
    if num < 1 or steps < 1 or batch_size < 1:
        problems.append(f"num, steps and batch_size must be at least 1 (got num={num}, steps={steps}, "
                        f"batch_size={batch_size})")
    if num > MAX_SAMPLES:
        cost = ""
        if image_shape is not None:
            pixels = math.prod(image_shape)
            cost = (f": {num:,} samples of {' × '.join(map(str, image_shape))} values would take "
                    f"{size_text(4 * pixels * num)} on disk and {num * steps:,} network evaluations")
        problems.append(f"--num {num:,} is more than the {MAX_SAMPLES:,} samples one command draws{cost}")
    if steps > MAX_STEPS:
        problems.append(f"--steps {steps:,} is more than the {MAX_STEPS:,} sampler steps allowed (the reference's "
                        f"FID sampler takes 1,000; {num:,} samples would take {num * steps:,} network evaluations)")
    if not math.isfinite(guidance) or not 0 <= guidance <= MAX_GUIDANCE:
        problems.append(f"--guidance must be a finite scale from 0 to {MAX_GUIDANCE:g}; got {guidance}")
    if batch_size > MAX_BATCH:
        problems.append(f"--batch-size {batch_size:,} is more than {MAX_BATCH:,}")
    if problems:
        raise ValueError("; ".join(problems))


class Sampling(NamedTuple):
    """A sampling of a diffusion run's checkpoint, drawn a batch at a time (:func:`sample_batches`)."""

    batches: Iterator[torch.Tensor]  # [n, C, H, W] float32 on the CPU, in the training data's scale (decoded)
    labels: torch.Tensor | None  # [num] the classes asked for, None for an unconditional model
    config: ExperimentConfig  # the run's
    step: int  # the checkpoint's
    weights: str  # "ema" or "model"
    sampler: str  # the sampler that draws them


class Drawn(NamedTuple):
    """Samples of a diffusion run's checkpoint (:func:`draw_samples`)."""

    images: torch.Tensor  # [num, C, H, W] float32 on the CPU, in the training data's scale (a VAE's: decoded)
    labels: torch.Tensor | None  # [num] the classes asked for, None for an unconditional model
    config: ExperimentConfig  # the run's
    step: int  # the checkpoint's
    weights: str  # "ema" or "model"
    sampler: str  # the sampler that drew them


def sample_batches(run: Run, *, num: int = 64, steps: int = 50, sampler: str | None = None, guidance: float = 0.0,
                   checkpoint: str = Checkpoint.LAST, ema: bool | None = None, seed: int = 0, batch_size: int = 256,
                   device: str = "auto", progress: bool = True) -> Sampling:
    """Draw ``num`` samples from a diffusion run's checkpoint, ``batch_size`` at a time (the batches are drawn as
    they are iterated; the request is checked, and the model loaded, before).

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
        ValueError: not a diffusion run, or a setting out of range (:func:`check_request`).
        CheckpointError: the checkpoint is missing, corrupt, or has no moving average when ``ema=True``.
    """
    check_request(min(num, MAX_SAMPLES), steps, guidance, batch_size)
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
    check_request(num, steps, guidance, batch_size, model.image_shape)  # its size named
    model.to(dev)
    decode = sample_decoder(cfg)  # latents back to images; None for a model of pixels
    labels = (torch.arange(num) % model.net.num_classes) if model.conditional else None

    def batches() -> Iterator[torch.Tensor]:
        generator = torch.Generator(device=dev).manual_seed(seed)
        with tqdm(total=num, desc="sampling", unit="img", disable=not progress, dynamic_ncols=True) as bar:
            for start in range(0, num, batch_size):
                n = min(batch_size, num - start)
                y = labels[start:start + n].to(dev) if labels is not None else None
                drawn = model.sample(n, steps=steps, sampler=sampler, y=y, guidance=guidance, generator=generator,
                                     device=dev)
                yield (decode(drawn) if decode is not None else drawn).float().cpu()
                bar.update(n)

    return Sampling(batches(), labels, cfg, step, weights, sampler)


def draw_samples(run: Run, **kwargs: Any) -> Drawn:
    """:func:`sample_batches` (its arguments) drawn whole, in memory."""
    sampling = sample_batches(run, **kwargs)
    return Drawn(torch.cat(list(sampling.batches)), *sampling[1:])


def _write_npz(path: Path, batches: Iterator[torch.Tensor], num: int, labels: np.ndarray) -> np.ndarray:
    """Write ``samples`` (the ``num`` samples of ``batches``, as they come) and ``labels`` into the ``.npz`` file
    ``path`` (deflated, as :func:`numpy.savez_compressed`; written to a temp file, then moved into place); returns
    the first :data:`GRID_MAX` samples."""
    first: list[np.ndarray] = []
    with atomic_path(path) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        with zf.open("samples.npy", "w", force_zip64=True) as f:
            header = False
            for batch in batches:
                array = np.ascontiguousarray(batch.numpy(), dtype=np.float32)
                if not header:
                    np.lib.format.write_array_header_2_0(f, {"descr": np.lib.format.dtype_to_descr(array.dtype),
                                                             "fortran_order": False,
                                                             "shape": (num, *array.shape[1:])})
                    header = True
                f.write(array.tobytes())
                if sum(len(a) for a in first) < GRID_MAX:
                    first.append(array[:GRID_MAX - sum(len(a) for a in first)])
        with zf.open("labels.npy", "w") as f:
            np.lib.format.write_array(f, labels, allow_pickle=False)
    return np.concatenate(first)


def sample_report(run: Run, *, num: int = 64, steps: int = 50, sampler: str | None = None, guidance: float = 0.0,
                  checkpoint: str = Checkpoint.LAST, ema: bool | None = None, seed: int = 0, batch_size: int = 256,
                  device: str = "auto", progress: bool = True) -> dict[str, Any]:
    """:func:`sample_batches` (its arguments), written as ``analysis/samples-<step>-<settings>.png`` (a grid of the
    first :data:`GRID_MAX`) and ``.npz`` (every sample, written batch by batch).

    Returns:
        ``{"png", "npz"}`` paths and the settings: ``step``, ``num``, ``steps``, ``sampler``, ``guidance``,
        ``weights``, ``seed``. The ``.npz`` holds ``samples [num, C, H, W]`` float32 in the training data's scale
        (standardised as the model saw it) and ``labels [num]`` (−1 for an unconditional model).
    """
    drawn = sample_batches(run, num=num, steps=steps, sampler=sampler, guidance=guidance, checkpoint=checkpoint,
                           ema=ema, seed=seed, batch_size=batch_size, device=device, progress=progress)
    settings = f"{drawn.sampler}{steps}" + (f"-w{guidance:g}" if guidance else "") + f"-{drawn.weights}-seed{seed}"
    png, npz = (run.analysis_path(layout.samples_name(drawn.step, settings, ext)) for ext in (".png", ".npz"))
    npz.parent.mkdir(exist_ok=True)
    labels = drawn.labels if drawn.labels is not None else torch.full((num,), -1)
    first = _write_npz(npz, drawn.batches, num, labels.numpy())
    atomic_write_bytes(png, grid_png(torch.from_numpy(first)))
    return {"png": png, "npz": npz, "step": drawn.step, "num": num, "steps": steps, "sampler": drawn.sampler,
            "guidance": guidance, "weights": drawn.weights, "seed": seed}


def format_samples(summary: dict[str, Any]) -> str:
    """One line for the command line."""
    guided = f", guidance {summary['guidance']:g}" if summary["guidance"] else ""
    return (f"{summary['num']} samples of step {summary['step']} ({summary['sampler']} sampler, {summary['steps']} "
            f"steps{guided}, {summary['weights']} weights, seed {summary['seed']}): {Path(summary['png']).name}")
