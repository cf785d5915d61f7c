"""What a busy neighbour on the other core costs training, apart from the CPU time it takes.

The Playground's training child trains on one core while the page (browser, server) works on the other. Even when
the child has its core to itself, a neighbour that moves megabytes per frame (a browser colour-mapping and copying
images) shares the caches and memory bandwidth, and each CPU-second of the child trains fewer steps. This measures
a bare Trainer of the Playground's default experiment, in steps per CPU-second of its thread (so time it waited for
a core does not count), alone and beside a neighbour process on the other core: a Python loop (CPU only) and numpy
streaming a 32 MB array (memory). Each neighbour's window sits between two windows alone, and is compared with their
mean, as the machine's speed drifts.

    python bench/neighbour.py [--pairs 5] [--steps 250]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import table  # noqa: E402
from bench.playground_live import CFG  # noqa: E402
from lab.config import ExperimentConfig, apply_overrides  # noqa: E402
from lab.train.runner import make_trainer  # noqa: E402

NEIGHBOURS = {
    "a Python loop (CPU only)": "x = 0\nwhile True: x += 1",
    "numpy streaming 32 MB (memory)": "import numpy as np\na = np.random.rand(4_000_000)\nwhile True: a *= 1.0000001",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="windows beside each neighbour")
    parser.add_argument("--steps", type=int, default=250, help="training steps per window")
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer = make_trainer(apply_overrides(ExperimentConfig(), {**CFG, "train.max_steps": 10**7}))
    trainer.fit(steps=CFG["train.eval_every"])

    def rate() -> float:
        """Steps per CPU-second of this thread over ``--steps`` steps."""
        t0 = time.thread_time()
        trainer.fit(steps=args.steps)
        return args.steps / (time.thread_time() - t0)

    ratios: dict[str, list[float]] = {name: [] for name in NEIGHBOURS}
    alone = [rate()]
    for _ in range(args.pairs):
        for name, code in NEIGHBOURS.items():
            proc = subprocess.Popen([sys.executable, "-c", code])
            time.sleep(0.3)  # it is running on the other core
            beside = rate()
            proc.kill()
            proc.wait()
            alone.append(rate())
            ratios[name].append(beside / ((alone[-2] + alone[-1]) / 2))
    print(f"Bare Trainer (Playground default), steps per CPU-second of its thread; {args.pairs} windows of "
          f"{args.steps} steps beside each neighbour, each against the windows alone either side")
    print(table(["neighbour on the other core", "median ratio", "lowest", "highest"], [
        ["none (windows alone: steps per CPU-second, median)", statistics.median(alone), min(alone), max(alone)],
        *([name, statistics.median(r), min(r), max(r)] for name, r in ratios.items())]))


if __name__ == "__main__":
    main()
