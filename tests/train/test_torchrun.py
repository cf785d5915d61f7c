"""``torchrun --nproc_per_node=2 -m lab train`` for real, with gloo on this CPU: a tiny MAE pretrains on an image
folder, rank 0 alone writes the run, a resumed run goes on as if never stopped, data-parallel gradients are those
of one process on the same global batch, and a tiny U-ViT stops cleanly on SIGTERM."""

import json
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
from lab.data.formats import make_synthetic_image_folder
from lab.train.build import build_model

pytestmark = pytest.mark.slow

TINY_MAE = ["model.embed_dim=32", "model.depth=2", "model.num_heads=2", "model.decoder_embed_dim=32",
            "model.decoder_depth=1", "model.decoder_num_heads=2", "train.batch_size=8", "train.epochs=3",
            "data.workers=0", "train.warmup_epochs=1", "train.lr_scaling=none", "train.lr=1e-3",
            "train.log_every=1", "train.threads=1", "train.rank_inputs=16"]


def _lab(*args: str, procs: int = 2, timeout: float = 240) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([*launcher, "-m", "lab", *args, "--no-progress"], capture_output=True, text=True,
                         timeout=timeout, env=env, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _records(run: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return make_synthetic_image_folder(tmp_path_factory.mktemp("data") / "stripes", classes=3, per_class=16, size=32)


@pytest.fixture(scope="module")
def mae_runs(images, tmp_path_factory) -> dict:
    """The tiny MAE trained whole under torchrun, and trained for 4 steps then resumed to the end; a copy of the
    sliced run as it stood before the resume (stopped at step 4) for the lock test. Each launch costs seconds of
    imports, so the tests below share these three."""
    base = tmp_path_factory.mktemp("mae")
    args = ["configs/mae_tiny.yaml", f"data.root={images}", *TINY_MAE]
    _lab("train", *args, "--runs-dir", str(base / "whole"))
    _lab("train", *args, "--runs-dir", str(base / "sliced"), "--steps", "4")
    (sliced,) = (base / "sliced").iterdir()
    stopped = json.loads((sliced / "status.json").read_text())["state"]
    shutil.copytree(sliced, base / "stopped" / sliced.name)
    _lab("resume", str(sliced))
    (whole,) = (base / "whole").iterdir()  # one folder: rank 1 wrote none of its own
    return {"whole": whole, "sliced": sliced, "sliced_state": stopped, "stopped": base / "stopped" / sliced.name}


def test_a_tiny_mae_pretrains_under_torchrun_and_resumes_exactly(mae_runs):
    run = mae_runs["whole"]
    assert len(list(run.parent.iterdir())) == 1  # rank 1 wrote no run folder of its own
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == status["total_steps"] == 9  # 48 images / (8 × 2)
    assert json.loads((run / "config.json").read_text())["world_size"] == 2
    evals = _records(run, "eval")
    assert [e["epoch"] for e in evals] == [1, 2, 3]
    assert evals[-1]["test_loss"] < evals[0]["test_loss"]  # it learns
    assert all(e["rank_effective"] >= 1.0 and "rank_entropy" in e for e in evals)
    assert len(list((run / "figures").glob("reconstruction-*.png"))) == 3
    assert (run / "checkpoints" / "last.pt").is_file()

    sliced = mae_runs["sliced"]
    assert mae_runs["sliced_state"] == "stopped"  # after --steps 4
    assert json.loads((sliced / "status.json").read_text())["state"] == "completed"
    whole, resumed = _records(run, "step"), _records(sliced, "step")
    assert [r["step"] for r in resumed] == [r["step"] for r in whole] == list(range(1, 10))
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in whole], rel=1e-6)  # step 5 on too


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


def test_sigterm_to_torchrun_stops_every_process_at_one_step_with_a_checkpoint(tmp_path):
    """What a cluster scheduler does at a job's time limit: torchrun passes SIGTERM on to its workers' process
    groups; they finish the step, agree to stop, and rank 0 leaves a resumable checkpoint (with the weights' moving
    average) and the state ``stopped``. The run is the tiny U-ViT diffusion config, so diffusion trains under
    torchrun too."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    # loader workers too: they get the signal as well, and must not fail the run by dying
    args = ["configs/uvit_tiny_digits.yaml", "model.embed_dim=16", "model.depth=2", "model.num_heads=2",
            "train.batch_size=16", "train.eval_every=1000", "train.log_every=1", "train.threads=1", "data.workers=1"]
    proc = subprocess.Popen([*launcher, "-m", "lab", "train", *args, "--runs-dir", str(tmp_path), "--no-progress"],
                            cwd=Path(__file__).resolve().parents[2], env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = list(tmp_path.iterdir())
            if runs and (runs[0] / "metrics.jsonl").is_file() and len(_records(runs[0], "step")) >= 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run never logged three steps")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    (run,) = tmp_path.iterdir()
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "stopped", (status, out[-2000:])
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert state["step"] == status["step"] >= 3 and status["step"] < status["total_steps"]
    assert state["ema"].keys() == state["model"].keys() and state["global_batch"] == 32


def test_every_rank_refuses_a_run_another_process_trains(mae_runs):
    """Rank 0 alone takes the lock; the other ranks learn its refusal, so no rank trains, waits or writes."""
    import socket

    run = mae_runs["stopped"]  # stopped at step 4: a resume would train on
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (run / "lock").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid, "since": 0}))
        before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*")}
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        out = subprocess.run([*launcher, "-m", "lab", "resume", str(run), "--no-progress"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"},
                             cwd=Path(__file__).resolve().parents[2])
        assert out.returncode != 0 and out.stderr.count(f"being trained by process {holder.pid}") == 2
        assert "lab/" not in out.stderr  # no traceback through the lab's code (torchrun prints its own summary)
        assert {p.name: p.stat().st_mtime_ns for p in run.rglob("*")} == before  # nothing written, no failed-rank
    finally:
        holder.kill()
        holder.wait()
