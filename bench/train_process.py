"""``lab train`` as a whole process against a plain PyTorch script of the same model, data and evaluation.

``python -m lab train configs/spiral_residual_droppath.yaml train.epochs=20`` (a run folder, metrics, status
heartbeats, checkpoints, TensorBoard, a progress bar) and a script that trains the same 32 × 32 residual MLP on the
same spiral with a bare loop and evaluates train and test accuracy once per epoch, as the lab's run does, each in a
fresh interpreter and timed from start to exit, in interleaved pairs whose order alternates (drifts in the
machine's speed hit both alike). Beside the wall time, the CPU time each process used (user + system, all its
threads): the work the lab adds, which a neighbour slowing the machine does not change.
Target: lab / plain <= 1.05 (median of the pairs, wall time).

    python bench/train_process.py [--pairs 3] [--epochs 20]
"""

from __future__ import annotations

import argparse
import compileall
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import table  # noqa: E402

CONFIG = "configs/spiral_residual_droppath.yaml"

PLAIN = """
import sys, torch, torch.nn.functional as F
sys.path.insert(0, {root!r})
from bench.train_spiral import plain_model
from lab.config import load_config
from lab.data.toy2d import make_toy_data
torch.set_num_threads(1)
cfg = load_config({config!r}, ["train.epochs={epochs}"])
data = make_toy_data(cfg.data)
torch.manual_seed(cfg.model.seed)
model = plain_model(cfg.model.depth, cfg.model.width)
opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=tuple(cfg.train.betas))
gen = torch.Generator().manual_seed(cfg.train.seed)
x, y, bs = data.x_train, data.y_train, cfg.train.batch_size
for epoch in range(cfg.train.epochs):
    model.train()
    perm = torch.randperm(len(x), generator=gen)
    for i in range(0, len(x), bs):
        idx = perm[i:i + bs]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
    model.eval()
    with torch.no_grad():
        acc = [(model(a).argmax(1) == b).float().mean().item() for a, b in
               ((data.x_train, data.y_train), (data.x_test, data.y_test))]
print("test acc", acc[1])
"""


def timed_run(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds from start to exit of ``cmd`` (run in the repository root; its output discarded) and the CPU
    seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    # both processes start as an installed package does, from compiled bytecode (pip compiles at install): a
    # checkout run with PYTHONDONTWRITEBYTECODE would recompile every changed module of the lab at each start
    compileall.compile_dir(ROOT / "lab", quiet=1, force=False)
    runs = tempfile.mkdtemp(prefix="lab-bench-")
    lab = [sys.executable, "-m", "lab", "train", CONFIG, f"train.epochs={args.epochs}", "--runs-dir", runs]
    plain = [sys.executable, "-c", PLAIN.format(root=str(ROOT), config=CONFIG, epochs=args.epochs)]
    t_lab, t_plain, c_lab, c_plain = [], [], [], []
    for pair in range(args.pairs):  # the order alternates: a drift in the machine's speed favours neither
        for cmd, times, cpu in ((plain, t_plain, c_plain), (lab, t_lab, c_lab))[::1 if pair % 2 == 0 else -1]:
            wall, used = timed_run(cmd)
            times.append(wall)
            cpu.append(used)
    ratios = [a / b for a, b in zip(t_lab, t_plain, strict=True)]
    cpu_ratios = [a / b for a, b in zip(c_lab, c_plain, strict=True)]
    ratio = statistics.median(ratios)
    print(f"{CONFIG} train.epochs={args.epochs}, whole process, {args.pairs} interleaved pairs")
    print(table(["process", "seconds (median)", "each pair", "target"], [
        ["plain PyTorch script", statistics.median(t_plain), " ".join(f"{t:.1f}" for t in t_plain), ""],
        ["python -m lab train", statistics.median(t_lab), " ".join(f"{t:.1f}" for t in t_lab), ""],
        ["lab / plain (median of pairs)", ratio, " ".join(f"{r:.3f}" for r in ratios),
         "<= 1.05 " + ("PASS" if ratio <= 1.05 else "FAIL")],
        ["CPU s: plain PyTorch script", statistics.median(c_plain), " ".join(f"{t:.1f}" for t in c_plain), ""],
        ["CPU s: python -m lab train", statistics.median(c_lab), " ".join(f"{t:.1f}" for t in c_lab), ""],
        ["CPU lab / plain (median of pairs)", statistics.median(cpu_ratios), " ".join(f"{r:.3f}" for r in cpu_ratios),
         ""],
    ]))

if __name__ == "__main__":
    main()
