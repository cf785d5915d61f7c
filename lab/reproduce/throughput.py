"""Training throughput of the full-scale models on this device, which ``lab reproduce --dry-run`` turns into
GPU-hours: ``lab throughput mae|uvit --record FILE`` (``bench/mae_throughput.py`` and ``bench/uvit_throughput.py``
run the same from a checkout).

Each measurement times a plain PyTorch training loop — the reference: ``loss = model(x)[0]``, backward, AdamW step
(and, for the U-ViT, the weights' moving average, as its reference code steps) on a batch already on the device, in
float32 — against :meth:`lab.train.loader.LoaderTrainer.train_step` on that batch (per-step seeding, learning rate,
the loss shared among processes) in float32 and, on CUDA, in bf16 autocast; ``compile`` adds a ``torch.compile``
row. Data loading is not part of these rows: the MAE's ``data_root`` adds one that reads an ImageFolder tree through
the engine's DataLoader, to show whether the disk and decoding keep up with the model. ``--record`` appends the
engine's fastest rate to the throughput file (:func:`~lab.reproduce.estimate.record_throughput`).

Targets (the benches' tables): the engine's float32 step within 10 % of plain (ratio ≥ 0.9); on CUDA, bf16 at
least 1.5 × plain float32.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from lab.config import ExperimentConfig, apply_overrides, load_config
from lab.nn.registry import model_parameters
from lab.reproduce.estimate import record_throughput
from lab.train.build import build_model, loader_data
from lab.train.distributed import World
from lab.train.loader import LoaderData, LoaderTrainer
from lab.train.optim import make_optimizer

Row = list  # [what, images/s, × plain]


@dataclass(frozen=True)
class Settings:
    """What one measurement runs: the model, the batch, how long, and the optional rows."""

    model: str
    batch: int
    steps: int
    repeats: int = 3
    compile: bool = False
    data_root: str | None = None
    workers: int = 8


def defaults(what: str) -> Settings:
    """The measurement of ``what`` (``mae`` or ``uvit``) at the paper's scale on CUDA, at a CPU-sized one without."""
    cuda = torch.cuda.is_available()
    if what == "mae":
        return Settings("mae_vit_base_patch16" if cuda else "mae_vit_tiny_patch4_32", 256 if cuda else 64,
                        10 if cuda else 3)
    return Settings("uvit_small" if cuda else "uvit_tiny", 128, 10 if cuda else 5)


def images_per_s(step: Callable[[], object], batch: int, steps: int, repeats: int, device: torch.device) -> float:
    """Median over ``repeats`` of ``steps`` steps, after two warm-up steps (allocator, autotuning, compilation)."""
    for _ in range(2):
        step()
    rates = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(batch * steps / (time.perf_counter() - t0))
    return statistics.median(rates)


def engine_rows(cfg: ExperimentConfig, data: LoaderData, batch: tuple[torch.Tensor, torch.Tensor], reference: float,
                settings: Settings, device: torch.device) -> list[Row]:
    """The loader engine's step on ``batch``: float32, bf16 autocast on CUDA, and compiled with ``settings.compile``."""
    variants = [("engine step, fp32", "fp32", False)]
    if device.type == "cuda":
        variants.append(("engine step, bf16 autocast", "bf16", False))
    if settings.compile:
        variants.append(("engine step, compiled", "bf16" if device.type == "cuda" else "fp32", True))
    rows = []
    for label, precision, compiled in variants:
        c = apply_overrides(cfg, {"train.precision": precision, "train.compile": compiled})
        trainer = LoaderTrainer(build_model(c, data), data, c.train, c.data, World(device=device))
        rate = images_per_s(lambda t=trainer: t.train_step([batch]), settings.batch, settings.steps,
                            settings.repeats, device)
        rows.append([label, rate, rate / reference])
    return rows


def _synthetic(batch: int, shape: tuple[int, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor,
                                                                                   LoaderData]:
    x = torch.randn(batch, *shape, device=device)
    y = torch.zeros(batch, dtype=torch.long, device=device)
    fake = torch.utils.data.TensorDataset(x[:2].cpu(), y[:2].cpu())
    return x, y, LoaderData(torch.utils.data.TensorDataset(x.cpu(), y.cpu()), fake, fake, 1, shape)


def measure(what: str, settings: Settings, record: str | None = None) -> tuple[str, list[Row]]:
    """Measure ``what`` (``mae`` or ``uvit``) on this machine's device; returns a line that names the setting and the
    rows; ``record``: the throughput file the engine's fastest rate is appended to."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if what == "mae":
        size = 224 if "patch16" in settings.model else 32
        shape = (3, size, size)
        cfg = load_config("mae_tiny", {"model.name": settings.model, "data.image_size": size,
                                       "train.batch_size": settings.batch, "train.precision": "fp32",
                                       "data.workers": 0, "train.rank_inputs": 2, "train.threads": 0})
    else:
        sizes = model_parameters(settings.model)[0]  # the registered model's own image size and channels
        shape = (sizes["in_chans"].default, sizes["img_size"].default, sizes["img_size"].default)
        cfg = load_config("uvit_tiny_digits", {"model.name": settings.model, "train.batch_size": settings.batch,
                                               "train.precision": "fp32", "train.threads": 0, "train.samples": 0,
                                               "train.ema": 0.9999})
    x, y, data = _synthetic(settings.batch, shape, device)
    model = build_model(cfg, data).to(device)
    optimizer = make_optimizer(model, cfg.train)
    ema = None
    if what == "uvit":
        from timm.utils import ModelEmaV3

        ema = ModelEmaV3(model, decay=cfg.train.ema)

    def plain() -> None:
        loss = model(x)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if ema is not None:
            ema.update(model)

    reference = images_per_s(plain, settings.batch, settings.steps, settings.repeats, device)
    rows: list[Row] = [["plain loop, fp32", reference, 1.0], *engine_rows(cfg, data, (x, y), reference, settings,
                                                                           device)]
    if what == "mae" and settings.data_root:
        rows.append(_loading_row(cfg, settings, reference, device))
    params = sum(p.numel() for p in model.parameters()) / 1e6
    head = (f"{settings.model} ({params:.1f} M parameters), images {list(shape)}, batch {settings.batch}, "
            f"{device.type}" + (f" ({torch.cuda.get_device_name()})" if cuda else
                                f", {torch.get_num_threads()} threads"))
    if record:
        best = max(rate for label, rate, _ in rows if label.startswith("engine step"))
        record_throughput(record, f"{settings.model}@{shape[-1]}", best, batch=settings.batch)
        head += f"; recorded in {record}"
    return head, rows


def _loading_row(cfg: ExperimentConfig, settings: Settings, reference: float, device: torch.device) -> Row:
    """The engine's DataLoader reading the ImageFolder tree ``settings.data_root``, epoch after epoch."""
    c = apply_overrides(cfg, {"data.root": settings.data_root, "data.workers": settings.workers})
    folder = loader_data(c)
    trainer = LoaderTrainer(build_model(c, folder), folder, c.train, c.data, World(device=device))

    def stream():
        for epoch in itertools.count():
            trainer.sampler.set_epoch(epoch)
            yield from trainer.loader

    batches = stream()
    rate = images_per_s(lambda: [t.to(device, non_blocking=True) for t in next(batches)], settings.batch,
                        settings.steps, settings.repeats, device)
    return [f"data loading, {settings.workers} workers", rate, rate / reference]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with right-aligned columns (floats to three decimals)."""
    cells = [list(map(str, headers))] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
