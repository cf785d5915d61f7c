import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from lab.cli import main
from lab.config import save_config
from lab.jobs.process import ProcessJob, attach
from lab.runs.store import CheckpointError, RunStore
from lab.train.checkpoint import load_checkpoint
from tests.jobs.helpers import tiny, wait_for

pytestmark = pytest.mark.slow  # each test starts Python processes that import torch


def _check_metrics(run, total, log_every=5):
    records, _ = run.read_metrics()
    steps = [r["step"] for r in records if r["kind"] == "step"]
    evals = [r["step"] for r in records if r["kind"] == "eval"]
    assert steps == list(range(log_every, total + 1, log_every)), "gaps or duplicates in step records"
    assert evals == sorted(set(evals)) and evals[-1] == total


def test_kill_9_then_resume_continues_from_the_checkpoint(tmp_path):
    # a run far longer than the test (the resume sets where it ends), held at a known point before the kill:
    # frozen (SIGSTOP) once its last checkpoint is at step 100 or later, it can neither finish nor write on
    cfg = tiny(**{"train.max_steps": 1_000_000, "train.epochs": 1_000_000, "train.eval_every": 25})
    run = RunStore(tmp_path).create("k")
    job = ProcessJob(run, cfg=cfg).start()

    def checkpointed_step() -> int:  # the heartbeat can show step 100 before step 100's checkpoint is written
        with contextlib.suppress(CheckpointError):
            return load_checkpoint(run)["step"]
        return 0

    assert wait_for(lambda: checkpointed_step() >= 100 or not job.is_alive(), timeout=120)
    assert job.is_alive(), (run.path / "process.log").read_text()[-2000:]
    os.killpg(job.proc.pid, signal.SIGSTOP)
    step_at_checkpoint = checkpointed_step()
    job.kill()  # SIGKILL: no chance to write anything
    status = job.status()
    assert status["state"] == "failed" and "exited with code -9" in status["message"]
    assert load_checkpoint(run)["step"] == step_at_checkpoint
    assert step_at_checkpoint >= 100 and step_at_checkpoint % 25 == 0
    # the killed process left its lock; recording the failure removed it, as it names a process that is gone
    assert not (run.path / "lock").exists()
    # a checkpoint write interrupted by the kill leaves only a temp file beside the good one
    (run.path / "checkpoints" / ".last.pt.interrupted.tmp").write_bytes(b"\x80\x02partial")
    end = step_at_checkpoint + 100
    resumed = ProcessJob(run, [sys.executable, "-m", "lab", "resume", str(run.path), f"train.max_steps={end}",
                               "--no-progress"]).start()
    final = resumed.wait(300)
    assert final["state"] == "completed" and final["step"] == end, final
    _check_metrics(run, end)
    assert not (run.path / "lock").exists()


def test_stop_uses_stop_file_first(tmp_path):
    run = RunStore(tmp_path).create("s")
    # a grace period far longer than a step, however loaded the machine: ending within it means no signal was sent
    job = ProcessJob(run, cfg=tiny(**{"train.max_steps": 100000}), grace_s=120).start()
    assert wait_for(lambda: run.read_status().get("state") == "running", timeout=300)
    job.stop()
    # exit code 0: the STOP file ended it within its grace period, no signal was sent
    assert job.status()["state"] == "stopped" and job.proc.returncode == 0


def test_sigterm_stops_cleanly_and_corrupt_checkpoint_is_reported(tmp_path, capsys):
    run = RunStore(tmp_path).create("t")
    job = ProcessJob(run, cfg=tiny(**{"train.max_steps": 100000})).start()
    assert wait_for(lambda: run.read_status().get("state") == "running", timeout=300)
    os.killpg(job.proc.pid, signal.SIGTERM)
    assert job.wait(120)["state"] == "stopped"
    run.checkpoint_path().write_bytes(b"garbage")
    assert main(["resume", str(run.path), "--no-progress"]) == 2  # the command line, in this process
    err = capsys.readouterr().err
    assert "last.pt cannot be read" in err and "--checkpoint best" in err
    assert run.read_status()["state"] == "stopped"  # refused before any write: the run keeps its state


def test_attach_follows_a_run_written_by_another_process(tmp_path):
    cfg = tiny(**{"train.max_steps": 300})
    run = RunStore(tmp_path).create("a")
    save_config(cfg, run.path / "config.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "lab", "train", str(run.path / "config.yaml"), "--run-dir",
                             str(run.path), "--no-progress", "--snapshot-every", "20"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        watcher = attach(run.path)
        cursor, seen_steps, versions = 0, [], []
        deadline = time.monotonic() + 300  # only there to end a hung process: the loop ends when the run does
        while proc.poll() is None and time.monotonic() < deadline:
            records, cursor = watcher.metrics_since(cursor)
            seen_steps += [r["step"] for r in records if r["kind"] == "step"]
            latest = watcher.latest("nodes")
            if latest and (not versions or latest[0] != versions[-1]):
                versions.append(latest[0])
            time.sleep(0.05)
        records, cursor = watcher.metrics_since(cursor)
        seen_steps += [r["step"] for r in records if r["kind"] == "step"]
    finally:
        proc.kill()
    assert seen_steps == list(range(5, 301, 5))
    assert versions == sorted(versions) and versions[-1] == 300 and len(versions) >= 2
    assert watcher.status()["state"] == "completed"
    with pytest.raises(FileNotFoundError):
        attach(tmp_path / "nope")
