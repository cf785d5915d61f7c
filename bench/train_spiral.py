"""ms per training step of the spiral model (32 blocks, width 32, batch 256): the lab trainer vs a plain loop.

The model is the residual MLP of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*.

Both run in this process on the same data, interleaved, on one torch thread; the plain loop is written here
with nothing but torch. Target: lab / plain <= 1.05.

    python bench/train_spiral.py [--steps 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table, timed  # noqa: E402
from lab.config import load_config  # noqa: E402
from lab.train.runner import make_trainer  # noqa: E402


class PlainBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(x))


def plain_model(depth: int, width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(2, width), *[PlainBlock(width) for _ in range(depth)], nn.Linear(width, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    # evaluation is timed separately: a huge eval_every keeps it out of the timed training steps
    cfg = load_config("configs/spiral_residual_droppath.yaml", ["train.lr=0.01", "train.eval_every=1000000000"])
    trainer = make_trainer(cfg)
    x, y = trainer.data.x_train, trainer.data.y_train
    model = plain_model(cfg.model.depth, cfg.model.width)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.999))
    gen = torch.Generator().manual_seed(0)
    bs = cfg.train.batch_size

    def plain(steps: int) -> None:
        perm = torch.randperm(len(x), generator=gen)
        for k in range(steps):
            idx = perm[(k * bs) % (len(x) - bs):][:bs]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()

    def lab(steps: int) -> None:
        trainer.total_steps = trainer.step + steps + 1  # never the end of the run
        trainer.fit(steps=steps)  # fit() ends with one evaluation, subtracted below

    plain(20)
    lab(20)
    t_plain, t_lab = [], []
    for _ in range(args.repeats):  # interleaved so drifts in machine load hit both
        t_plain += timed(lambda: plain(args.steps), 1)
        t_lab += timed(lambda: lab(args.steps), 1)
    t_eval = median(timed(trainer.evaluate, 3))
    ms_plain = 1000 * median(t_plain) / args.steps
    ms_lab = 1000 * (median(t_lab) - t_eval) / args.steps
    print(f"spiral model: depth {cfg.model.depth}, width {cfg.model.width}, batch {bs}, {args.steps} steps x "
          f"{args.repeats} repeats, torch {torch.__version__}, 1 thread")
    print(table(["loop", "ms/step (median)", "ratio vs plain", "target"], [
        ["plain PyTorch", ms_plain, 1.0, ""],
        ["lab Trainer", ms_lab, ms_lab / ms_plain, "<= 1.05 " + ("PASS" if ms_lab / ms_plain <= 1.05 else "FAIL")],
    ]))
    print(f"(not in the ratio) one evaluation of train + test ({len(x)} + {len(trainer.data.x_test)} samples): "
          f"{1000 * t_eval:.1f} ms, run once per epoch of {trainer.steps_per_epoch} steps by default")


if __name__ == "__main__":
    main()
