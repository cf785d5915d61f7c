"""Throughput of the ensemble trainer against one plain training loop, and the memory of a 32-member sweep.

The model is the residual MLP of ``configs/spiral.yaml`` (32 blocks, width 32, batch 256, float32) with the
decayed shortcuts of *Residual Connections Harm Generative Representation Learning*: ``model.shortcut=linear``,
members spread over α_min ∈ [0.4, 1.0]. "plain" is one model trained by the ordinary ``Trainer.train_step``
(batch gathering included) with α_min = 0.7; the engine (:class:`lab.train.ensemble.EnsembleTrainer`) trains K
members per step, timed per model-step (step time / K). Evaluation is not timed. Measurements are interleaved
over repeats in one process; medians are shown. One thread (the lab's default, ``train.threads=1``);
``--default-threads`` adds a section at torch's default thread count (on a small machine shared with other work
that section measures contention rather than the engine: each thread waits for a core).

Targets: K = 1 no slower than plain; K = 8 at least 2.5 × plain's throughput per model; K = 32 at least 4 ×.
Memory: a K = 32 sweep (``create_sweep`` + ``train_sweep``: run folders, recorders, checkpoints, evaluations)
must raise the process's peak resident set by less than 1 GB, measured as ``bench/jacobians.py`` does (reset
the peak where Linux allows it, subtract the resident set at the start); libraries are imported beforehand.

    python bench/sweep.py [--repeats 5] [--quick] [--default-threads]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table, timed  # noqa: E402
from bench.jacobians import peak_mb, reset_peak, rss_mb  # noqa: E402
from lab.config import ExperimentConfig, load_config  # noqa: E402
from lab.runs.store import RunStore  # noqa: E402
from lab.sweeps import create_sweep, plan_sweep, train_sweep  # noqa: E402
from lab.train.ensemble import EnsembleTrainer  # noqa: E402
from lab.train.runner import make_trainer  # noqa: E402

CONFIG = "configs/spiral.yaml"
SIZES = (1, 8, 32)
TARGETS = {1: 1.0, 8: 2.5, 32: 4.0}  # speed-up per model over plain
MEMORY_MB = 1024.0


def alpha_mins(k: int) -> list[float]:
    """K values spread evenly over [0.4, 1.0]; the single member sits at 0.7, as the plain run."""
    return [0.7] if k == 1 else [round(1.0 - 0.6 * i / (k - 1), 4) for i in range(k)]


def config(alpha_min: float, threads: int) -> ExperimentConfig:
    return load_config(CONFIG, ["model.shortcut=linear", f"model.alpha_min={alpha_min}", f"train.threads={threads}",
                                "train.epochs=1000"])


def plain_step(threads: int) -> Callable[[], None]:
    trainer = make_trainer(config(0.7, threads))
    x, y = trainer.data.x_train, trainer.data.y_train

    def run() -> None:
        idx = trainer.batch_indices(trainer.step)
        trainer.train_step(x[idx], y[idx])
        trainer.step += 1

    return run


def engine_step(k: int, threads: int) -> Callable[[], None]:
    ensemble = EnsembleTrainer([config(a, threads) for a in alpha_mins(k)])

    def run() -> None:
        ensemble.train_step()
        ensemble.step += 1

    return run


def section(threads: int, repeats: int, steps: dict[int, int]) -> list[list[object]]:
    """ms per model-step of plain (key 0) and of the engine at each K, as table rows."""
    torch.set_num_threads(threads)
    cases = {0: plain_step(threads), **{k: engine_step(k, threads) for k in SIZES}}
    times: dict[int, list[float]] = {k: [] for k in cases}
    for step in cases.values():  # warm-up: first-call costs of every kernel
        for _ in range(3):
            step()
    for _ in range(repeats):
        for case, step in cases.items():
            n = steps[case]
            times[case].append(timed(lambda step=step, n=n: [step() for _ in range(n)], repeats=1)[0] / n)
    plain = median(times[0]) * 1e3
    rows: list[list[object]] = [[threads, "plain Trainer.train_step", 1, plain, plain, 1.0, "", ""]]
    for k in SIZES:
        per_step = median(times[k]) * 1e3
        speedup = plain / (per_step / k)
        target = TARGETS[k]
        rows.append([threads, "EnsembleTrainer.train_step", k, per_step, per_step / k, speedup,
                     f">= {target:g}x", "PASS" if speedup >= target else "FAIL"])
    return rows


def sweep_memory(k: int, steps: int) -> float:
    """Peak resident-set rise (MB) of a k-member sweep of ``steps`` steps with two evaluations."""
    from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (the recorders' import, done before the base)

    plan = plan_sweep(CONFIG, ["model.shortcut=linear", f"model.alpha_min={','.join(map(str, alpha_mins(k)))}",
                               f"train.max_steps={steps}", f"train.eval_every={max(steps // 2, 1)}",
                               "train.epochs=1000"])
    with tempfile.TemporaryDirectory() as tmp:
        reset_peak()
        base = rss_mb()
        folder, runs = create_sweep(plan, RunStore(tmp))
        statuses = train_sweep(plan, folder, runs, progress=False)
        rise = peak_mb() - base
    if any(s["state"] != "completed" for s in statuses):
        raise RuntimeError(f"the memory sweep did not complete: {[s['state'] for s in statuses]}")
    return rise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="few steps: a smoke run, targets not meaningful")
    parser.add_argument("--default-threads", action="store_true",
                        help="also measure at torch's default thread count")
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    scale = 0.2 if args.quick else 1.0
    steps = {0: 40, 1: 40, 8: 15, 32: 6}
    steps = {k: max(1, int(n * scale)) for k, n in steps.items()}
    memory_steps = 4 if args.quick else 20
    memory = sweep_memory(32, memory_steps)
    rows = section(1, args.repeats, steps)
    if args.default_threads and default_threads != 1:
        rows += section(default_threads, args.repeats, steps)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"torch {torch.__version__}, default threads {default_threads}, load average {load}"
          f"{' (--quick: targets not meaningful)' if args.quick else ''}")
    print(table(["threads", "what", "K", "ms/step", "ms/model-step", "x plain", "target", "pass"], rows))
    print()
    print(table(["what", "+peak MB", "target", "pass"],
                [[f"K=32 sweep ({memory_steps} steps, 2 evaluations, 32 run folders)", memory, f"< {MEMORY_MB:g}",
                  "PASS" if memory < MEMORY_MB else "FAIL"]]))


if __name__ == "__main__":
    main()
