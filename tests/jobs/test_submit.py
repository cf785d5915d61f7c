"""Sweeps sent as cluster jobs through submitit: its local executor for real, SLURM's sbatch script as submitted."""

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.cli import main
from lab.config import ConfigError, save_config
from lab.jobs.submit import Resources, SubmittedMember, parse_time, submit_sweep
from lab.runfolder.lock import read_holder
from lab.runs.store import RunStore
from lab.sweeps import plan_sweep, read_sweep
from lab.train.checkpoint import load_checkpoint
from lab.train.runner import train_and_evaluate
from tests.jobs.helpers import tiny, wait_for

STEPS = 3000


@pytest.mark.slow  # two jobs, one of them started twice: each start is a Python process that imports torch
def test_a_two_member_sweep_runs_as_local_jobs_and_a_preempted_member_resumes_exactly(tmp_path):
    config = tmp_path / "tiny.yaml"
    save_config(tiny(**{"train.max_steps": STEPS}), config)
    plan = plan_sweep(config, ["train.seed=0,1"], ensemble=False)
    sweep = submit_sweep(plan, RunStore(tmp_path / "runs"), Resources("local"))
    run = sweep.runs[0]
    # the jobs' pickles are the submitter's alone: nobody else with access to the shared runs folder reads or
    # replaces the code a job runs
    assert (sweep.folder.path / "jobs").stat().st_mode & 0o777 == 0o700

    # the scheduler's warning signal (a preemption, or 90 s before the time limit) reaches member 0's process as
    # soon as it trains (status.json says "running" from the first step on, then only once a second: the tiny model
    # trains thousands of steps a second, so waiting for a later step would race the run's end)
    assert wait_for(lambda: run.read_status().get("state") == "running", timeout=120), run.read_status()
    os.kill(read_holder(run.path)["pid"], signal.SIGUSR2)
    statuses = sweep.wait()
    assert [s["state"] for s in statuses] == ["completed", "completed"], statuses
    log = Path(sweep.job_records()[0]["stderr"]).read_text() + Path(sweep.job_records()[0]["stdout"]).read_text()
    stopped = re.search(r"stopped: stopped at step (\d+)", log)
    assert stopped and "Requeued job" in log, log
    assert 0 < int(stopped.group(1)) < STEPS
    records, _ = run.read_metrics()
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert steps == list(range(5, STEPS + 1, 5)), "each step recorded once over both attempts"
    # exactly: the member's config trained without interruption ends with the same weights
    alone = RunStore(tmp_path / "alone").create("alone")
    train_and_evaluate(plan.members[0].config, alone, progress=False)
    requeued, uninterrupted = load_checkpoint(run)["model"], load_checkpoint(alone)["model"]
    assert requeued.keys() == uninterrupted.keys()
    for key, value in uninterrupted.items():
        assert torch.allclose(requeued[key], value, atol=1e-6), key
    # sweep.json names every member's job and log, and its final state
    members = read_sweep(sweep.folder.path)["members"]
    assert [m["state"] for m in members] == ["completed", "completed"]
    assert [m["job_id"] for m in members] == [job.job_id for job in sweep.jobs]
    assert all(Path(m["stderr"]).is_file() for m in members)


@pytest.mark.slow  # two processes that import torch and join one gloo group
def test_a_member_trains_data_parallel_over_its_jobs_tasks(tmp_path):
    config = tmp_path / "tiny.yaml"
    save_config(tiny(**{"train.max_steps": 20, "train.engine": "loader"}), config)
    plan = plan_sweep(config, [], ensemble=False)
    sweep = submit_sweep(plan, RunStore(tmp_path / "runs"), Resources("local", tasks_per_node=2))
    (status,) = sweep.wait()
    assert status["state"] == "completed" and status["step"] == 20, status
    (run,) = sweep.runs
    assert run.config_record()["world_size"] == 2  # one run, written by rank 0 of the job's two processes


def test_the_slurm_submission_is_one_job_array_with_the_resources_asked_for(tmp_path, monkeypatch, capsys):
    """What sbatch receives: a stand-in sbatch (and srun) on PATH records the script submitit writes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("sbatch", "srun"):
        script = bin_dir / command
        script.write_text(f'#!/bin/sh\ncp "$1" "{tmp_path}/submitted.sh"\necho "Submitted batch job 4242"\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "tiny.yaml"
    save_config(tiny(), config)
    code = main(["submit", str(config), "model.alpha_min=1.0,0.7", "train.engine=loader", "--executor", "slurm",
                 "--partition", "gpu", "--nodes", "2", "--gpus-per-node", "4", "--time", "1:30:00",
                 "--array-parallelism", "1", "--runs-dir", str(tmp_path / "runs")])
    assert code == 0
    script = (tmp_path / "submitted.sh").read_text()
    for line in ("--array=0-1%1", "--partition=gpu", "--nodes=2", "--gpus-per-node=4", "--ntasks-per-node=4",
                 "--time=90", "--signal=USR2@90"):
        assert f"#SBATCH {line}\n" in script, (line, script)
    assert re.search(r"^srun .* -m submitit\.core\._submit ", script, re.M), script
    (folder,) = (tmp_path / "runs").iterdir()
    sweep = json.loads((folder / "sweep.json").read_text())
    assert [m["job_id"] for m in sweep["members"]] == ["4242_0", "4242_1"]
    assert [m["state"] for m in sweep["members"]] == ["queued", "queued"]
    assert sweep["members"][1]["stderr"] == str(folder / "jobs" / "4242_1_0_log.err")
    assert "4242_1" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--executor", "local", "--nodes", "2"], "--nodes and --partition are SLURM's"),
    (["--executor", "local", "--time", "90"], "is not H:MM:SS"),
    (["--executor", "local", "--tasks-per-node", "2", "train.engine=tensor"], "train.engine=tensor trains in one"),
    (["--executor", "slurm"], "sbatch and srun not found"),
    (["--executor", "local", "model.depht=3"], "depht"),
])
def test_bad_submissions_are_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, arguments, message):
    monkeypatch.setenv("PATH", str(tmp_path))  # no SLURM here
    config = tmp_path / "tiny.yaml"
    save_config(tiny(), config)
    assert main(["submit", str(config), "--runs-dir", str(tmp_path / "runs"), *arguments]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_time_limits_read_as_slurm_writes_them():
    assert [parse_time(t) for t in ("1:30:00", "0:01:00", "0:01:01", "2-00:00:00")] == [90, 1, 2, 2880]
    with pytest.raises(ConfigError, match="under a minute"):
        parse_time("0:00:30")


def test_a_requeue_ends_the_process_with_submitits_exit_code_at_once(monkeypatch):
    """submitit's handler requeues by exiting with a code its controller reads; the member ends the process with that
    code at once, not through the interpreter's teardown (which a native thread can abort, losing the requeue)."""
    from lab.jobs.submit import Preemption

    def submitit_handler(signum, frame):
        raise SystemExit(173)  # as submitit's local environment does after saving the job

    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise RuntimeError("exited")

    previous = signal.signal(signal.SIGUSR2, submitit_handler)
    try:
        preemption = Preemption()
        monkeypatch.setattr(os, "_exit", fake_exit)
        with pytest.raises(RuntimeError, match="exited"):
            preemption.requeue()
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert exits == [173]


def test_submitit_is_imported_by_a_job_or_a_submission_only():
    """The cluster extra is not every command's import: a job requeues itself through submitit's own machinery."""
    code = "import sys, lab.jobs.submit; print('submitit' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip() == "False"
    import submitit

    job = SubmittedMember("runs/a-member")
    requeued = job.checkpoint()  # what submitit pickles again when it requeues the job
    assert isinstance(requeued, submitit.helpers.DelayedSubmission)
    assert requeued.function is job and requeued.args == () and requeued.kwargs == {}
