"""Seeds trained per second: a reproduction's seeds as members of one ensemble against the same seeds run apart.

A reproduction trains each seed of a measurement (``model.seed=k train.seed=k``, k = 0 … S − 1) as a separate run
of the ordinary trainer (:func:`lab.train.runner.make_trainer`, the :class:`lab.train.tensor.Trainer` that
``train_and_evaluate`` runs). Seeds differ only in keys an ensemble may vary (:data:`lab.train.ensemble.MEMBER_KEYS`),
so all S could train as members of one :class:`lab.train.ensemble.EnsembleTrainer`, the engine of ``lab sweep``.
Both sides train every seed for the same ``train.max_steps`` and evaluate it the same way (the trainers' own
cadence: once per epoch and at the end); trainer construction (model initialisation, optimiser) is timed, the data
set is built once beforehand and shared. Cases: Figure 3's model (32 blocks × 32 on the spiral), the rank claim's
(8 blocks × 32 on digits, α_min 0.5 as the sweep's lowest; then the sweep's 6 α_min × 8 seeds), and the toy MAE
(width 16, 75 % of pixels hidden). Sides are interleaved over repeats in one process, one thread; medians are
shown. Each case checks that member 0 ends with the training loss of separate run 0 (float32 batched matmuls
round differently from a solo run's, so the check is loose: ``--rtol``).

    python -m bench.seeds [--repeats 3] [--steps 20] [--seeds 8] [--rtol 0.001]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table, timed  # noqa: E402
from lab.config import ExperimentConfig, load_config  # noqa: E402
from lab.data.toy2d import ToyData  # noqa: E402
from lab.train.build import build_data  # noqa: E402
from lab.train.ensemble import EnsembleTrainer  # noqa: E402
from lab.train.runner import make_trainer  # noqa: E402

ALPHAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
"""The rank claim's α_min values (lab.reproduce.decayed, cpu budget)."""
RANK = ["data.name=digits", "train.batch_size=64", "model.width=32", "model.depth=8", "train.lr=0.003",
        "model.shortcut=linear"]
CASES: dict[str, tuple[str, list[str], tuple[float, ...]]] = {
    "Figure 3: spiral, 32 x 32": ("configs/spiral.yaml", ["model.depth=32", "model.width=32"], ()),
    "rank: digits, 8 x 32": ("configs/spiral.yaml", RANK, (0.5,)),
    "rank: digits, 8 x 32, 6 alpha_min": ("configs/spiral.yaml", RANK, ALPHAS),
    "toy MAE: digits, width 16": ("configs/toy_mae_digits.yaml", ["model.width=16", "train.mask_ratio=0.75"], ()),
}
"""Case name -> (config, overrides, α_min values: each seed is trained at every one; () keeps the config's)."""


def configs(path: str, overrides: list[str], alphas: tuple[float, ...], seeds: int, steps: int
            ) -> list[ExperimentConfig]:
    """One config per member: every α_min of ``alphas`` (slowest) for every seed, ``steps`` steps, one thread."""
    base = [*overrides, f"train.max_steps={steps}", "train.threads=1"]
    return [load_config(path, [*base, *([f"model.alpha_min={a}"] if alphas else []), f"model.seed={k}",
                               f"train.seed={k}", f"name=seed-{k}"])
            for a in (alphas or (None,)) for k in range(seeds)]


def separate(cfgs: list[ExperimentConfig], data: ToyData) -> list[float]:
    """Train each config as its own run; the final training loss of each."""
    return [make_trainer(cfg, data=data).fit()["train_loss"] for cfg in cfgs]


def ensemble(cfgs: list[ExperimentConfig], data: ToyData) -> list[float]:
    """Train the configs as the members of one ensemble; the final training loss of each member."""
    metrics = EnsembleTrainer(cfgs, data=data).fit()
    return [metrics[k]["train_loss"] for k in range(len(cfgs))]


def case(cfgs: list[ExperimentConfig], repeats: int, rtol: float) -> tuple[float, float]:
    """Median seconds of the separate runs and of the ensemble, after a warm-up that checks their losses agree.

    Raises:
        AssertionError: member 0's final training loss is not within ``rtol`` of separate run 0's.
    """
    data = build_data(cfgs[0])
    solo, members = separate(cfgs[:1], data)[0], ensemble(cfgs, data)[0]  # warm-up and the same-work check
    assert abs(members - solo) <= rtol * abs(solo), f"member 0 ends at loss {members:.6g}, separate run 0 {solo:.6g}"
    separate_s, ensemble_s = [], []
    for _ in range(repeats):
        separate_s += timed(lambda: separate(cfgs, data), repeats=1)
        ensemble_s += timed(lambda: ensemble(cfgs, data), repeats=1)
    return median(separate_s), median(ensemble_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="train.max_steps of every seed")
    parser.add_argument("--seeds", type=int, default=8, help="S: seeds 0 … S − 1")
    parser.add_argument("--rtol", type=float, default=1e-3, help="member 0's final loss against separate run 0's")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name, (path, overrides, alphas) in CASES.items():
        cfgs = configs(path, overrides, alphas, args.seeds, args.steps)
        separate_s, ensemble_s = case(cfgs, args.repeats, args.rtol)
        n = len(cfgs)
        rows.append([name, n, args.steps, separate_s, ensemble_s, n / separate_s, n / ensemble_s,
                     separate_s / ensemble_s])
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"torch {torch.__version__}, one thread, load average {load}, steps per seed: {args.steps}, "
          f"seeds {args.seeds}, repeats {args.repeats}")
    print(table(["case", "members", "steps", "separate runs s", "ensemble s", "seeds/s separate", "seeds/s ensemble",
                 "x separate"], rows))


if __name__ == "__main__":
    main()
