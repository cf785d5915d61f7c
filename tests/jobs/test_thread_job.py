import math
import threading
import time

import numpy as np

from lab.jobs.thread import ThreadJob
from lab.runs.store import RunStore
from tests.jobs.helpers import tiny, wait_for


def test_snapshots_arrive_with_increasing_versions_and_stop_is_fast(tmp_path):
    job = ThreadJob(tiny(), RunStore(tmp_path).create("t"), cadence={"nodes": (5, 0.0)}).start()
    seen = []
    assert wait_for(lambda: job.latest("nodes") is not None)
    while len(seen) < 4:
        v, snapshot = job.latest("nodes")
        if not seen or v > seen[-1][0]:
            seen.append((v, int(snapshot["step"])))
        time.sleep(0.01)
    assert [v for v, _ in seen] == sorted(v for v, _ in seen)
    assert [s for _, s in seen] == sorted(s for _, s in seen)
    assert snapshot["maps"].shape == (5, 8, 50, 50) and snapshot["maps"].dtype == np.float32
    job.stop()
    assert not job.is_alive()
    status = job.status()
    assert status["state"] == "stopped" and "stopped at step" in status["message"]
    assert job.run.has_checkpoint("last") and job.run.snapshot_versions("nodes")


def test_pause_step_resume(tmp_path):
    job = ThreadJob(tiny(), RunStore(tmp_path).create("p"), paused=True).start()
    assert wait_for(lambda: job.status()["state"] == "paused")
    step = job.status()["step"]
    time.sleep(0.3)
    assert job.status()["step"] == step
    job.step(3)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == step + 3)
    assert int(job.latest("nodes")[1]["step"]) == step + 3  # the paused snapshot is the paused model
    job.resume()
    assert wait_for(lambda: job.status()["step"] > step + 10)
    job.stop()
    assert job.status()["state"] == "stopped"


def test_diverging_run_ends_as_diverged_and_keeps_last_good_snapshot(tmp_path):
    cfg = tiny(**{"train.optimizer": "sgd", "train.lr": 10.0})
    job = ThreadJob(cfg, RunStore(tmp_path).create("d"), cadence={"nodes": (1, 0.0)}).start()
    job.wait(60)
    status = job.status()
    assert status["state"] == "diverged"
    assert f"diverged at step {status['step']}" in status["message"] and "train.lr=10" in status["message"]
    version, snapshot = job.latest("nodes")
    assert all(np.isfinite(a).all() for a in snapshot.values() if np.asarray(a).dtype.kind == "f")
    records, _ = job.metrics_since(0)
    assert all(math.isfinite(r.get("loss", 0.0)) for r in records)


def test_resume_after_stop_continues_without_duplicate_metrics(tmp_path):
    store = RunStore(tmp_path)
    cfg = tiny(**{"train.max_steps": 120})
    job = ThreadJob(cfg, store.create("r"), paused=True).start()
    job.step(50)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 50)
    job.stop()
    stopped_at = job.status()["step"]
    assert stopped_at == 50
    resumed = ThreadJob(cfg, job.run, resume=True).start()
    resumed.wait(60)
    status = resumed.status()
    assert status["state"] == "completed" and status["step"] == 120 > stopped_at
    records, _ = resumed.metrics_since(0)
    steps = [r["step"] for r in records if r["kind"] == "step"]
    evals = [r["step"] for r in records if r["kind"] == "eval"]
    assert steps == list(range(5, 121, 5))  # no gap, no duplicate
    assert evals == [20, 40, 50, 60, 80, 100, 120]  # plus the evaluation + checkpoint taken at the stop


def test_training_thread_is_a_daemon_and_ends(tmp_path):
    before = set(threading.enumerate())
    job = ThreadJob(tiny(**{"train.max_steps": 10}), RunStore(tmp_path).create("e")).start()
    job.wait(60)
    assert job.status()["state"] == "completed"
    assert set(threading.enumerate()) <= before | {threading.current_thread()}
