"""Wall time of an 8-member sweep against one run of the same config and steps, everything included.

``bench/sweep.py`` times the ensemble's training step alone; this script times what a user waits for: one
``train_and_evaluate`` run (run folder, recorder, evaluations, checkpoints, TensorBoard) against ``create_sweep`` +
``train_sweep`` of 8 members (8 run folders, the same per-member records). The model is the residual MLP of
``configs/spiral.yaml`` with ``model.shortcut=linear``; the run has α_min = 0.7, the sweep's members spread over
[0.4, 1.0]. Both are measured in the same process, interleaved over repeats, one thread; medians are shown.

Target: the sweep takes at most 3.2 × the run's wall time (8 models for the time of 3.2).

    python bench/sweep_vs_run.py [--repeats 3] [--steps 0] [--profile sweep.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table, timed  # noqa: E402
from lab.config import ExperimentConfig, load_config  # noqa: E402
from lab.runs.store import RunStore  # noqa: E402
from lab.sweeps import SweepPlan, create_sweep, plan_sweep, train_sweep  # noqa: E402
from lab.train.runner import train_and_evaluate  # noqa: E402

CONFIG = "configs/spiral.yaml"
MEMBERS = 8
TARGET = 3.2


def overrides(steps: int) -> list[str]:
    return ["model.shortcut=linear", "train.threads=1", *([f"train.max_steps={steps}"] if steps else [])]


def alpha_mins(k: int) -> list[float]:
    return [round(1.0 - 0.6 * i / (k - 1), 4) for i in range(k)]


def one_run(cfg: ExperimentConfig) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        status = train_and_evaluate(cfg, RunStore(tmp).create(cfg.name), progress=False)
    if status["state"] != "completed":
        raise RuntimeError(f"the run ended {status['state']}: {status['message']}")


def one_sweep(plan: SweepPlan) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder, runs = create_sweep(plan, RunStore(tmp))
        statuses = train_sweep(plan, folder, runs, progress=False)
    if any(s["state"] != "completed" for s in statuses):
        raise RuntimeError(f"the sweep did not complete: {[s['state'] for s in statuses]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0, help="train.max_steps (0: the config's epochs)")
    parser.add_argument("--profile", help="write a cProfile of one sweep to this file instead of timing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(CONFIG, [*overrides(args.steps), "model.alpha_min=0.7"])
    plan = plan_sweep(CONFIG, [*overrides(args.steps), f"model.alpha_min={','.join(map(str, alpha_mins(MEMBERS)))}"])
    from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (imported once, before any timing)

    one_run(cfg)  # warm-up: first-call costs of every kernel and import
    if args.profile:
        cProfile.runctx("one_sweep(plan)", globals(), {"one_sweep": one_sweep, "plan": plan}, args.profile)
        print(f"profile of one sweep written to {args.profile}")
        return
    run_s, sweep_s = [], []
    for _ in range(args.repeats):
        run_s += timed(lambda: one_run(cfg), repeats=1)
        sweep_s += timed(lambda: one_sweep(plan), repeats=1)
    run, sweep = median(run_s), median(sweep_s)
    ratio = sweep / run
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    steps = plan.members[0].config.train.max_steps or "config's epochs"
    print(f"torch {torch.__version__}, one thread, load average {load}, steps: {steps}, repeats {args.repeats}")
    print(table(["what", "models", "wall s", "s per model", "x run", "target", "pass"], [
        ["train_and_evaluate (one run)", 1, run, run, 1.0, "", ""],
        [f"train_sweep ({MEMBERS} members)", MEMBERS, sweep, sweep / MEMBERS, ratio, f"<= {TARGET:g}x",
         "PASS" if ratio <= TARGET else "FAIL"],
    ]))


if __name__ == "__main__":
    main()
