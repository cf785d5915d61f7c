"""``torchrun --nproc_per_node=2 -m lab train`` for real, with gloo on this CPU: a tiny U-ViT diffusion model trains
with rank 0 alone writing the run, stops cleanly on SIGTERM and, resumed, goes on as if never stopped (losses and
moving average); data-parallel gradients are those of one process on the same global batch; and every rank refuses
a run another process trains. (The MAE trains under torchrun in notebook 04's smoke run.)"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lab.cli import main
from lab.config import load_config
from lab.train.build import build_model
from tests.waiting import deadline, scaled

pytestmark = pytest.mark.slow

# the tiny U-ViT diffusion config at its smallest: 40 steps of 2 × 16 digits, evaluated at the end; a loader worker per
# process, as a real run has (it gets a scheduler's signal too, and must not fail the run by dying)
TINY_UVIT = ["configs/uvit_tiny_digits.yaml", "model.embed_dim=16", "model.depth=2", "model.num_heads=2",
             "train.batch_size=16", "train.max_steps=40", "train.eval_every=1000", "train.samples=4",
             "train.sample_steps=3", "train.log_every=1", "train.threads=1", "data.workers=1"]
LAUNCHER = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
ROOT = Path(__file__).resolve().parents[2]


def _lab(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    out = subprocess.run([*LAUNCHER, "-m", "lab", *args, "--no-progress"], capture_output=True, text=True,
                         timeout=scaled(timeout), env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _records(run: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def _terminated(runs: Path) -> tuple[Path, str]:
    """Train :data:`TINY_UVIT` under torchrun into ``runs`` and send torchrun SIGTERM once three steps are logged, as
    a cluster scheduler does at a job's time limit; returns the run folder and the launch's output."""
    proc = subprocess.Popen([*LAUNCHER, "-m", "lab", "train", *TINY_UVIT, "--runs-dir", str(runs), "--no-progress"],
                            cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        end = deadline(120)
        while time.monotonic() < end:
            found = list(runs.iterdir()) if runs.is_dir() else []
            if found and (found[0] / "metrics.jsonl").is_file() and len(_records(found[0], "step")) >= 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run never logged three steps")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=scaled(60))
    finally:
        proc.kill()
    (run,) = runs.iterdir()
    return run, out


@pytest.fixture(scope="module")
def uvit_runs(tmp_path_factory) -> dict:
    """The tiny U-ViT trained whole under torchrun; the same stopped by SIGTERM (a copy kept as it stood, for the
    lock test) and then resumed to the end. Each launch costs seconds of imports, so the tests below share them."""
    base = tmp_path_factory.mktemp("uvit")
    _lab("train", *TINY_UVIT, "--runs-dir", str(base / "whole"))
    stopped, out = _terminated(base / "stopped")
    status = json.loads((stopped / "status.json").read_text())
    state = torch.load(stopped / "checkpoints" / "last.pt", weights_only=True)
    shutil.copytree(stopped, base / "copy" / stopped.name)
    _lab("resume", str(stopped))
    (whole,) = (base / "whole").iterdir()  # one folder: rank 1 wrote none of its own
    return {"whole": whole, "resumed": stopped, "stopped_status": status, "stopped_state": state, "output": out,
            "copy": base / "copy" / stopped.name}


def test_a_tiny_u_vit_trains_under_torchrun_and_resumes_exactly(uvit_runs):
    run = uvit_runs["whole"]
    assert len(list(run.parent.iterdir())) == 1  # rank 1 wrote no run folder of its own
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == status["total_steps"] == 40
    assert json.loads((run / "config.json").read_text())["world_size"] == 2
    (final,) = _records(run, "eval")
    assert final["step"] == 40 and math.isfinite(final["test_loss"])
    assert [p.name for p in (run / "figures").iterdir()] == ["samples-000000040.png"]
    resumed = uvit_runs["resumed"]
    assert json.loads((resumed / "status.json").read_text())["state"] == "completed"
    whole, again = _records(run, "step"), _records(resumed, "step")
    assert [r["step"] for r in again] == [r["step"] for r in whole] == list(range(1, 41))
    assert [r["loss"] for r in again] == pytest.approx([r["loss"] for r in whole], rel=1e-6)  # after the stop too
    a, b = (torch.load(r / "checkpoints" / "last.pt", weights_only=True) for r in (run, resumed))
    assert all(torch.equal(a["ema"][k], b["ema"][k]) for k in a["ema"])  # and the same moving average


def test_data_parallel_gradients_are_those_of_one_process_on_the_global_batch(tmp_path):
    """Plain SGD, one step: two processes on batches of 32 move the weights as one process (this one, no torchrun)
    on a batch of 64 (the sampler gives the two shards of the same 64 samples). The default residual MLP has no
    batch statistics."""
    common = ["configs/spiral.yaml", "train.engine=loader", "train.optimizer=sgd", "train.momentum=0",
              "train.lr=0.5", "train.max_steps=1", "train.lr_schedule=constant", "data.workers=0", "data.n=1024"]
    _lab("train", *common, "train.batch_size=32", "--runs-dir", str(tmp_path / "ddp"))
    assert main(["train", *common, "train.batch_size=64", "--runs-dir", str(tmp_path / "one"), "--no-progress"]) == 0
    (ddp,), (one,) = (list((tmp_path / d).iterdir()) for d in ("ddp", "one"))
    a, b = (torch.load(r / "checkpoints" / "last.pt", weights_only=True)["model"] for r in (ddp, one))
    start = torch.load(ddp / "checkpoints" / "last.pt", weights_only=True)["step"]
    assert start == 1 and a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=2e-6, rtol=1e-5)
    start = build_model(load_config("configs/spiral.yaml")).state_dict()
    assert max((a[k] - start[k]).abs().max().item() for k in a) > 1e-3  # the step did move the weights


def test_sigterm_to_torchrun_stops_every_process_at_one_step_with_a_checkpoint(uvit_runs):
    """What a cluster scheduler does at a job's time limit: torchrun passes SIGTERM on to its workers' process
    groups; they finish the step, agree to stop, and rank 0 leaves a resumable checkpoint (with the weights' moving
    average) and the state ``stopped`` (the resume of the test above continues from it)."""
    status, state = uvit_runs["stopped_status"], uvit_runs["stopped_state"]
    assert status["state"] == "stopped", (status, uvit_runs["output"][-2000:])
    assert state["step"] == status["step"] >= 3 and status["step"] < status["total_steps"]
    assert state["ema"].keys() == state["model"].keys() and state["global_batch"] == 32


def test_every_rank_refuses_a_run_another_process_trains(uvit_runs):
    """Rank 0 alone takes the lock; the other ranks learn its refusal, so no rank trains, waits or writes."""
    import socket

    run = uvit_runs["copy"]  # stopped by SIGTERM: a resume would train on
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (run / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid, "since": 0}))
        before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*")}
        out = subprocess.run([*LAUNCHER, "-m", "lab", "resume", str(run), "--no-progress"], capture_output=True,
                             text=True, timeout=scaled(120), env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
        assert out.returncode != 0 and out.stderr.count(f"being trained by process {holder.pid}") == 2
        assert "lab/" not in out.stderr  # no traceback through the lab's code (torchrun prints its own summary)
        assert {p.name: p.stat().st_mtime_ns for p in run.rglob("*")} == before  # nothing written, no failed-rank
    finally:
        holder.kill()
        holder.wait()
