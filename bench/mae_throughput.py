"""MAE pretraining throughput: images per second of a plain PyTorch training loop against the loader engine's step,
on the same model, batch and device, measured in one run.

"plain" is the reference: ``loss = model(x)[0]; loss.backward(); AdamW step`` on a batch already on the device,
in float32. The engine rows time :meth:`lab.train.loader.LoaderTrainer.train_step` on that batch (per-step
seeding, learning rate, the loss shared among processes) in float32 and, on CUDA, in bf16 autocast; with
``--compile`` a ``torch.compile`` row is added. Data loading is not part of these rows: ``--data ROOT`` adds one
that reads an ImageFolder tree through the engine's DataLoader (workers, pinned memory) to show whether the disk
and decoding keep up with the model.

On a GPU (the check to run when one is lent): ViT-B/16 at 224 px, batch 256, where the paper's recipe runs::

    python bench/mae_throughput.py                     # CUDA: mae_vit_base_patch16, batch 256, bf16 row
    python bench/mae_throughput.py --data /data/imagenet --workers 10

On a CPU it defaults to the CIFAR-scale ``mae_vit_tiny_patch4_32`` at batch 64. Targets: the engine's float32 step
within 10 % of plain (ratio ≥ 0.9); on CUDA, bf16 at least 1.5 × plain float32.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table  # noqa: E402
from lab.config import apply_overrides, load_config  # noqa: E402
from lab.reproduce.estimate import record_throughput  # noqa: E402
from lab.train.build import build_model, loader_data  # noqa: E402
from lab.train.distributed import World  # noqa: E402
from lab.train.loader import LoaderData, LoaderTrainer  # noqa: E402
from lab.train.optim import make_optimizer  # noqa: E402


def _images_per_s(step, batch: int, steps: int, repeats: int, device: torch.device) -> float:
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
    return median(rates)


def engine_rows(cfg, data: LoaderData, batch: tuple[torch.Tensor, torch.Tensor], reference: float,
                args: argparse.Namespace, device: torch.device) -> list[list]:
    """``[what, images/s, × plain]`` of the loader engine's step on ``batch``: float32, bf16 autocast on CUDA, and
    compiled with ``args.compile``."""
    variants = [("engine step, fp32", "fp32", False)]
    if device.type == "cuda":
        variants.append(("engine step, bf16 autocast", "bf16", False))
    if args.compile:
        variants.append(("engine step, compiled", "bf16" if device.type == "cuda" else "fp32", True))
    rows = []
    for label, precision, compiled in variants:
        c = apply_overrides(cfg, {"train.precision": precision, "train.compile": compiled})
        trainer = LoaderTrainer(build_model(c, data), data, c.train, c.data, World(device=device))
        rate = _images_per_s(lambda t=trainer: t.train_step([batch]), args.batch, args.steps, args.repeats, device)
        rows.append([label, rate, rate / reference])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--model", default="mae_vit_base_patch16" if cuda else "mae_vit_tiny_patch4_32")
    parser.add_argument("--batch", type=int, default=256 if cuda else 64)
    parser.add_argument("--steps", type=int, default=10 if cuda else 3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="add a torch.compile row")
    parser.add_argument("--record", default=None, metavar="FILE",
                        help="append the engine's fastest rate to FILE, which `lab reproduce --dry-run "
                             "--throughput FILE` estimates GPU-hours from")
    parser.add_argument("--data", default=None, help="an ImageFolder root: add a data-loading row")
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()

    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(max(1, torch.get_num_threads()))
    size = 224 if "patch16" in args.model else 32
    cfg = load_config("configs/mae_tiny.yaml", {"model.name": args.model, "data.image_size": size,
                                                "train.batch_size": args.batch, "train.precision": "fp32",
                                                "data.workers": 0, "train.rank_inputs": 2, "train.threads": 0})
    x = torch.randn(args.batch, 3, size, size, device=device)
    y = torch.zeros(args.batch, dtype=torch.long, device=device)
    fake = torch.utils.data.TensorDataset(x[:2].cpu(), y[:2].cpu())
    data = LoaderData(torch.utils.data.TensorDataset(x.cpu(), y.cpu()), fake, fake, 1, (3, size, size))
    rows = []

    model = build_model(cfg, data).to(device)
    optimizer = make_optimizer(model, cfg.train)

    def plain() -> None:
        loss = model(x)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    reference = _images_per_s(plain, args.batch, args.steps, args.repeats, device)
    rows.append(["plain loop, fp32", reference, 1.0])
    rows += engine_rows(cfg, data, (x, y), reference, args, device)
    if args.data:
        c = apply_overrides(cfg, {"data.root": args.data, "data.workers": args.workers})
        folder = loader_data(c)
        trainer = LoaderTrainer(build_model(c, folder), folder, c.train, c.data, World(device=device))

        def stream():  # the training loader, epoch after epoch, as the engine reads it
            for epoch in itertools.count():
                trainer.sampler.set_epoch(epoch)
                yield from trainer.loader

        batches = stream()
        rate = _images_per_s(lambda: [t.to(device, non_blocking=True) for t in next(batches)], args.batch,
                             args.steps, args.repeats, device)
        rows.append([f"data loading, {args.workers} workers", rate, rate / reference])

    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"{args.model} ({params:.1f} M parameters), {size} px, batch {args.batch}, {device.type}"
          + (f" ({torch.cuda.get_device_name()})" if cuda else f", {torch.get_num_threads()} threads"))
    print(table(["what", "images/s", "× plain"], rows))
    if args.record:
        best = max(rate for what, rate, _ in rows if what.startswith("engine step"))
        record = record_throughput(args.record, f"{args.model}@{size}", best, batch=args.batch)
        print(f"recorded in {args.record}: {record}")
    if cuda:
        print(f"peak CUDA memory: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
