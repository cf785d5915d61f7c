"""U-ViT diffusion training throughput: images per second of a plain PyTorch training loop against the loader
engine's step, on the same model, batch and device, measured in one run.

"plain" is the reference, as the U-ViT reference's ``train.py`` steps: ``loss = model(x)[0]`` (the ε-prediction
loss at a uniform t), backward, AdamW step, then the weights' moving average (timm's ``ModelEmaV3``), on a batch
already on the device, in float32. The engine rows time :meth:`lab.train.loader.LoaderTrainer.train_step` on that
batch (per-step seeding, learning rate, the loss shared among processes, the same moving average) in float32 and,
on CUDA, in bf16 autocast; ``--compile`` adds a ``torch.compile`` row. Sampling and data loading are not timed.

On a GPU (the check to run when one is lent): U-ViT-S/2 on 32 × 32 pixels, batch 128, as Table 4's CIFAR row::

    python bench/uvit_throughput.py                    # CUDA: uvit_small, batch 128, bf16 row

On a CPU it defaults to ``uvit_tiny`` (8 × 8 digits) at batch 128. Target: the engine's float32 step within 10 % of
plain (ratio ≥ 0.9); on CUDA, bf16 at least 1.5 × plain float32.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import table  # noqa: E402
from bench.mae_throughput import _images_per_s, engine_rows  # noqa: E402
from lab.config import load_config  # noqa: E402
from lab.nn.registry import model_parameters  # noqa: E402
from lab.reproduce.estimate import record_throughput  # noqa: E402
from lab.train.build import build_model  # noqa: E402
from lab.train.loader import LoaderData  # noqa: E402
from lab.train.optim import make_optimizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--model", default="uvit_small" if cuda else "uvit_tiny")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10 if cuda else 5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="add a torch.compile row")
    parser.add_argument("--record", default=None, metavar="FILE",
                        help="append the engine's fastest rate to FILE, which `lab reproduce --dry-run "
                             "--throughput FILE` estimates GPU-hours from")
    args = parser.parse_args()

    from timm.utils import ModelEmaV3

    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(max(1, torch.get_num_threads()))
    cfg = load_config("configs/uvit_tiny_digits.yaml", {"model.name": args.model, "train.batch_size": args.batch,
                                                        "train.precision": "fp32", "train.threads": 0,
                                                        "train.samples": 0, "train.ema": 0.9999})
    sizes = model_parameters(args.model)[0]  # the registered model's own image size and channels
    shape = (sizes["in_chans"].default, sizes["img_size"].default, sizes["img_size"].default)
    x = torch.randn(args.batch, *shape, device=device)
    y = torch.zeros(args.batch, dtype=torch.long, device=device)
    fake = torch.utils.data.TensorDataset(x[:2].cpu(), y[:2].cpu())
    data = LoaderData(torch.utils.data.TensorDataset(x.cpu(), y.cpu()), fake, fake, 1, shape)
    rows = []

    model = build_model(cfg, data).to(device)
    optimizer = make_optimizer(model, cfg.train)
    ema = ModelEmaV3(model, decay=cfg.train.ema)

    def plain() -> None:
        loss = model(x)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ema.update(model)

    reference = _images_per_s(plain, args.batch, args.steps, args.repeats, device)
    rows.append(["plain loop, fp32", reference, 1.0])
    rows += engine_rows(cfg, data, (x, y), reference, args, device)

    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"{args.model} ({params:.1f} M parameters), images {list(shape)}, batch {args.batch}, {device.type}"
          + (f" ({torch.cuda.get_device_name()})" if cuda else f", {torch.get_num_threads()} threads"))
    print(table(["what", "images/s", "× plain"], rows))
    if args.record:
        best = max(rate for what, rate, _ in rows if what.startswith("engine step"))
        record = record_throughput(args.record, f"{args.model}@{shape[-1]}", best, batch=args.batch)
        print(f"recorded in {args.record}: {record}")
    if cuda:
        print(f"peak CUDA memory: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
