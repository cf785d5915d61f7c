"""Science check for Residual Alignment at CPU scale: a Type-4-like FC ResNet on sklearn digits.

Checks the properties RA1–RA4 of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* on a
model small enough for a laptop.

Run: ``python scripts/science_ra.py [--quick] [--epochs N] [--inputs N]``. Trains the same 8-block, D = 128
fully-connected ResNet (post-activation, BatchNorm, as the paper's) twice with the lab Trainer — with skips (Type 4a)
and without (Type 4b, shortcut ``none``) — on the same data, seed and budget: SGD with momentum, cosine learning
rate, large weight decay (the paper's §2.3 uses lr 0.1, cosine, weight decay 1e-2 / 5e-2 for FC models). Then, at N
test inputs, it takes every block's dense residual Jacobian and reports:

- test accuracy;
- RA2: the mean off-diagonal (i ≠ j) alignment score of U_{j,C}ᵀ J_i V_{j,C} (fraction of energy on the diagonal)
  beside its random baseline (Haar-random bases, same J_i and C);
- RA3: mean of the top-C singular values over the mean of the next C (C = 10 classes);
- RA4: least-squares fit of 1/σ₁ against the block index (slope, R²), σ₁ averaged over inputs;
- RA1: straightness and spacing CV of the inputs' trajectories through the blocks.

Expected if RA occurs (as the paper reports): with skips, alignment well above the baseline and above the no-skip model;
1/σ₁ rising with depth; top-C singular values dominating the rest.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from lab.analysis.alignment import (
    alignment_grid,
    alignment_scores,
    inverse_sigma_fit,
    jacobian_svds,
    random_baseline,
)
from lab.analysis.jacobian import residual_jacobians
from lab.analysis.trajectories import trajectory_stats
from lab.config import TrainConfig
from lab.data.images import load_digits
from lab.data.toy2d import ToyData
from lab.nn.registry import create_model
from lab.nn.resnets import FCResNet  # noqa: F401  (registers ra_type4a / ra_type4b)
from lab.train.trainer import Callback, Trainer


class CosineLR(Callback):
    """Cosine learning-rate decay from the configured lr to 0 over the run (the Residual Alignment paper, §2.3)."""

    def on_step_end(self, trainer: Trainer, loss: float) -> None:
        lr = 0.5 * trainer.cfg.lr * (1 + math.cos(math.pi * min(trainer.step / trainer.total_steps, 1.0)))
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr


def train(name: str, data: ToyData, cfg: TrainConfig, depth: int, width: int) -> tuple[torch.nn.Module, dict]:
    model = create_model(name, seed=0, depth=depth, width=width, in_dim=data.x_train.shape[1], num_classes=10)
    metrics = Trainer(model, data, cfg, callbacks=[CosineLR()]).fit()
    return model.eval(), metrics


def ra_metrics(model: torch.nn.Module, x: torch.Tensor, C: int) -> dict[str, float]:
    """RA1–RA4 numbers of ``model`` averaged over the inputs ``x [N, in]``."""
    J = residual_jacobians(model, x).double()  # [N, L, D, D]
    N, L = J.shape[:2]
    off = ~torch.eye(L, dtype=torch.bool)
    scores, baselines, sigmas = [], [], []
    for n in range(N):
        svds = jacobian_svds(J[n], 2 * C)  # exact; top 2C to compare the top C with the next C
        grid = alignment_grid(J[n], C, svds=svds)
        scores.append(alignment_scores(grid)[off].mean().item())
        baselines.append(np.mean([random_baseline(J[n, i], C, trials=20, seed=i)["mean"] for i in range(L)]))
        sigmas.append(torch.stack([s for _, s, _ in svds]))  # [L, 2C]
    S = torch.stack(sigmas)  # [N, L, 2C]
    fit = inverse_sigma_fit(S[:, :, 0].mean(dim=0))
    with torch.no_grad():
        states = torch.stack(model.forward_intermediates(x, intermediates_only=True))
    traj = trajectory_stats(states)
    return {
        "align_offdiag": float(np.mean(scores)),
        "baseline": float(np.mean(baselines)),
        "topC_over_next": (S[..., :C].mean(-1) / S[..., C:].mean(-1)).mean().item(),
        "slope": fit["slope"],
        "r2": fit["r2"],
        "inv_sigma1": fit["inv_sigma"],
        "straightness": traj["straightness"],
        "spacing_cv": traj["spacing_cv"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few epochs and inputs: a smoke run")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default 300; 10 with --quick)")
    parser.add_argument("--inputs", type=int, default=None, help="test inputs analysed (default 32; 4 with --quick)")
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--weight-decay", type=float, default=1e-2)
    args = parser.parse_args()
    epochs = args.epochs or (10 if args.quick else 300)
    n_inputs = args.inputs or (4 if args.quick else 32)
    C = 10

    split = load_digits(seed=0).flat()
    mean, std = split.x_train.mean(), split.x_train.std()
    data = ToyData((split.x_train - mean) / std, split.y_train, (split.x_test - mean) / std, split.y_test, "digits")
    cfg = TrainConfig(optimizer="sgd", lr=args.lr, momentum=0.9, weight_decay=args.weight_decay, batch_size=128,
                      epochs=epochs, seed=0, device="cpu", threads=1)
    print(f"digits: {len(data.x_train)} train / {len(data.x_test)} test, 64 features, {C} classes; "
          f"FC ResNet L={args.depth}, D={args.width}, post-activation + BatchNorm; SGD lr {args.lr} cosine, "
          f"momentum 0.9, wd {args.weight_decay}, batch 128, {epochs} epochs; RA metrics at {n_inputs} test inputs, "
          f"K = C = {C}")
    rows = {}
    for label, name in (("skips (4a)", "ra_type4a"), ("no skips (4b)", "ra_type4b")):
        t = time.perf_counter()
        model, metrics = train(name, data, cfg, args.depth, args.width)
        t_train = time.perf_counter() - t
        t = time.perf_counter()
        rows[label] = {"test_acc": metrics["test_acc"], "train_acc": metrics["train_acc"],
                       **ra_metrics(model, data.x_test[:n_inputs], C)}
        print(f"  {label}: trained in {t_train:.1f} s, analysed in {time.perf_counter() - t:.1f} s")

    print()
    cols = ("test acc", "train acc", "align i!=j", "baseline", "top-C/next-C", "1/s1 slope", "1/s1 R^2",
            "straight", "spacing CV")
    keys = ("test_acc", "train_acc", "align_offdiag", "baseline", "topC_over_next", "slope", "r2", "straightness",
            "spacing_cv")
    print(f"{'model':<15}" + "".join(f"{c:>13}" for c in cols))
    for label, r in rows.items():
        print(f"{label:<15}" + "".join(f"{r[k]:>13.4g}" for k in keys))
    print()
    for label, r in rows.items():
        print(f"1/sigma_1 by block, {label}: " + " ".join(f"{v:.3g}" for v in r["inv_sigma1"]))
    a, b = rows["skips (4a)"], rows["no skips (4b)"]
    checks = {
        "alignment with skips > 2x baseline": a["align_offdiag"] > 2 * a["baseline"],
        "alignment with skips > without": a["align_offdiag"] > b["align_offdiag"],
        "1/sigma_1 rises with depth (slope > 0, R^2 > 0.5), skips": a["slope"] > 0 and a["r2"] > 0.5,
        "top-C singular values dominate (ratio > 2), skips": a["topC_over_next"] > 2,
    }
    print()
    for what, ok in checks.items():
        print(f"{'yes' if ok else 'NO ':<4} {what}")


if __name__ == "__main__":
    main()
