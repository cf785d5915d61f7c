"""Training throughput of the spiral model headless vs inside a ThreadJob publishing a snapshot every 10 steps,
and how fast every kind of job stops: from ``stop()`` to the job's end, and a killed child to its failure shown.

The model is the 32 × 32 residual MLP of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*.

Headless = the lab trainer with no callbacks. The job records metrics, status and checkpoints as any run does,
and builds the node-map snapshot (the 33 × 32 × 50 × 50 grid forward) every 10 steps, beside training
(:mod:`lab.snapshots.shadow`); the same job with its snapshots built on the training thread is measured too. Target: job
>= 90 % of headless.

Stopping, each in steps of the headless trainer measured in the same run (a job stops after its current step):
a ThreadJob's ``stop()`` until it has ended (target < 1 s); a SweepJob of three small members (target < 2 s); a
ChildJob's ``stop(timeout=0)``, which a page's Reset calls on the session's thread and must return at once (target
< 0.5 s), and until its child has ended (target: within its grace period, ``GRACE_S``, so no signal was needed); and
a ChildJob whose process is SIGKILLed (out of memory, a crash in native code) until its status says failed (target
< 2 s), read from the pipe that closes, not from a stale heartbeat.
The tests check what these do, never how fast (a loaded machine is several times slower).

    python bench/jobs.py [--steps 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table  # noqa: E402
from lab.config import load_config  # noqa: E402
from lab.jobs.child import GRACE_S, ChildJob  # noqa: E402
from lab.jobs.sweep_job import SweepJob  # noqa: E402
from lab.jobs.thread import ThreadJob  # noqa: E402
from lab.runs.store import RunStore  # noqa: E402
from lab.sweeps import create_sweep, plan_sweep  # noqa: E402
from lab.train.runner import make_trainer  # noqa: E402

SWEEP = ["model.depth=3", "model.width=8", "data.n=512", "train.epochs=1000", "train.eval_every=10",
         "train.log_every=5", "model.shortcut=linear", "model.alpha_min=1.0,0.8,0.6"]
"""The SweepJob stopped: three small members trained as one ensemble."""


def _until(condition, poll: float = 0.005) -> float:
    """Seconds until ``condition()`` holds."""
    t0 = time.perf_counter()
    while not condition():
        time.sleep(poll)
    return time.perf_counter() - t0


def _step(job) -> int:
    return job.status().get("step") or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config("configs/spiral_residual_droppath.yaml", ["train.lr=0.01", f"train.max_steps={args.steps}"])
    store = RunStore(tempfile.mkdtemp(prefix="lab-bench-"))

    def headless() -> float:
        trainer = make_trainer(cfg)
        t0 = time.perf_counter()
        trainer.fit()
        return args.steps / (time.perf_counter() - t0)

    def in_job(beside: bool = True) -> float:
        job = ThreadJob(cfg, store.create("bench"), cadence={"nodes": (10, 0.0)}, disk_every_s=2.0)
        if not beside:  # the snapshots built on the training thread, as before lab.snapshots.shadow
            job.publisher.beside = None
        job.start()
        while job.status().get("state") != "running":  # start timing once model and data are built
            time.sleep(0.005)
        start_step, t0 = job.status().get("step", 0), time.perf_counter()
        job.wait()
        return (args.steps - start_step) / (time.perf_counter() - t0)

    headless()  # warm-up (first optimizer construction imports torch._dynamo)
    rates_h, rates_j, rates_inline = [], [], []
    for _ in range(args.repeats):
        rates_h.append(headless())
        rates_j.append(in_job())
        rates_inline.append(in_job(beside=False))
    endless = cfg.__class__(**{**cfg.__dict__, "train": cfg.train.__class__(
        **{**cfg.train.__dict__, "max_steps": 0, "epochs": 1000})})
    latencies = []
    for _ in range(5):
        job = ThreadJob(endless, store.create("stop")).start()
        _until(lambda job=job: job.latest("nodes") is not None and _step(job) > 0)
        t0 = time.perf_counter()
        job.stop()
        latencies.append(time.perf_counter() - t0)
        assert not job.is_alive()
    sweep_stops = []
    for _ in range(3):
        plan = plan_sweep("configs/spiral.yaml", SWEEP)
        job = SweepJob(plan, *create_sweep(plan, store)).start()
        _until(lambda job=job: _step(job) > 20)
        t0 = time.perf_counter()
        job.stop()
        sweep_stops.append(time.perf_counter() - t0)
        assert not job.is_alive()
    child_returns, child_ends, child_killed = [], [], []
    for _ in range(3):
        job = ChildJob.training(endless, store.create("child"), disk_every_s=0).start()
        _until(lambda job=job: _step(job) > 0)
        t0 = time.perf_counter()
        job.stop(timeout=0)
        child_returns.append(time.perf_counter() - t0)
        child_ends.append(child_returns[-1] + _until(lambda job=job: not job.is_alive()))
        job = ChildJob.training(endless, store.create("killed"), disk_every_s=0).start()
        _until(lambda job=job: _step(job) > 0)
        job.proc.kill()
        child_killed.append(_until(lambda job=job: job.status()["state"] == "failed"))
    def timer_lag(seconds: float = 3.0) -> list[float]:
        """Overshoot (ms) of a 10 ms sleep on this thread: how late an event loop's callbacks would run."""
        lags, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            time.sleep(0.01)
            lags.append(1000 * (time.perf_counter() - t - 0.01))
        return sorted(lags)

    idle = timer_lag()
    busy_job = ThreadJob(cfg.__class__(**{**cfg.__dict__, "train": cfg.train.__class__(
        **{**cfg.train.__dict__, "max_steps": 0, "epochs": 1000})}), store.create("lag")).start()
    while busy_job.status().get("state") != "running":
        time.sleep(0.01)
    busy = timer_lag()
    busy_job.stop()
    h, j, inline = median(rates_h), median(rates_j), median(rates_inline)
    print(f"spiral model (32 x 32, batch 256), {args.steps} steps x {args.repeats} repeats, 1 torch thread")
    print(table(["run", "steps/s (median)", "ratio vs headless", "target"], [
        ["headless trainer", h, 1.0, ""],
        ["ThreadJob, snapshot / 10 steps", j, j / h, ">= 0.90 " + ("PASS" if j / h >= 0.9 else "FAIL")],
        ["  the same, snapshots built on the training thread", inline, inline / h, ""],
    ]))
    step_s = 1 / h

    def stop_row(name: str, seconds: list[float], target: float) -> list[object]:
        return [name, median(seconds), max(seconds), median(seconds) / step_s,
                f"< {target:g} s " + ("PASS" if max(seconds) < target else "FAIL")]

    print(table(["stopping", "median s", "max s", "median / headless step", "target"], [
        stop_row("ThreadJob: stop() -> ended", latencies, 1.0),
        stop_row("SweepJob, 3 members: stop() -> ended", sweep_stops, 2.0),
        stop_row("ChildJob: stop(timeout=0) returns", child_returns, 0.5),
        stop_row("ChildJob: stop(timeout=0) -> child ended", child_ends, GRACE_S),
        stop_row("ChildJob SIGKILLed -> status failed", child_killed, 2.0)]))
    p95 = lambda xs: xs[int(0.95 * (len(xs) - 1))]  # noqa: E731
    print(table(["10 ms timer on the serving thread", "median lag ms", "p95 lag ms"], [
        ["no job", median(idle), p95(idle)], ["a ThreadJob training", median(busy), p95(busy)]]))


if __name__ == "__main__":
    main()
