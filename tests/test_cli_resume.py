"""``lab resume`` and ``lab train`` against the faults and misuses that once lost runs or wrote where they should not:
each test is the attack or fault it prevents."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from lab.cli import main
from lab.config import config_of_run, load_config
from lab.runs.store import RunStore
from lab.train.core import Callback
from lab.train.runner import train_and_evaluate

SMALL = ["configs/spiral.yaml", "model.depth=3", "model.width=8", "data.n=256", "train.batch_size=32",
         "train.optimizer=sgd", "train.lr=0.05", "train.eval_every=8", "train.epochs=100", "--no-progress"]


def _train(runs, *extra):
    assert main(["train", *SMALL, "--runs-dir", str(runs), *extra]) == 0
    (run,) = [p for p in runs.iterdir()]
    return run


def _files(folder):
    """Every file below ``folder`` with its bytes (what a refused command must leave untouched)."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _evals(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "eval"]


def test_resume_without_last_checkpoint_is_refused_and_loses_nothing(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=40")
    (run / "checkpoints" / "last.pt").unlink()
    before = _files(run)
    assert main(["resume", run.name, "--runs-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "last.pt is missing" in err and "--checkpoint best" in err and "--restart" in err
    assert _files(run) == before  # metrics, best.pt and status exactly as they were; no lock left behind


def test_resume_from_best_sets_later_records_aside_and_keeps_the_best(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=40")
    metrics = (run / "metrics.jsonl").read_bytes()
    best_acc = max(r["test_acc"] for r in _evals(run))
    (run / "checkpoints" / "last.pt").write_bytes(b"torn by a full disk")
    assert main(["resume", run.name, "--runs-dir", str(tmp_path), "--checkpoint", "best", "train.max_steps=48",
                 "--no-progress"]) == 0
    history = run / "history"
    kept = sorted(p.name for p in history.iterdir())
    assert any(n.startswith("metrics-") for n in kept) and any(n.startswith("last-before-step-") for n in kept)
    aside = next(history.glob("metrics-*.jsonl"))
    assert aside.read_bytes() == metrics  # the whole history as it was, beside the rewound file
    assert (history / next(n for n in kept if n.startswith("last-"))).read_bytes() == b"torn by a full disk"
    evals = _evals(run)
    assert max(r["test_acc"] for r in evals) >= best_acc and evals[-1]["step"] == 48
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)  # still the best model of the run
    assert best["best_acc"] == max(r["test_acc"] for r in evals) and best["best_acc"] >= best_acc
    steps = [r["step"] for r in evals]
    assert steps == sorted(set(steps))  # no step recorded twice
    change = json.loads((run / "config.json").read_text())["resume_changes"][-1]
    assert change["source"] == "best" and change["changes"] == {"train.max_steps": {"from": 40, "to": 48}}


def test_corrupt_last_checkpoint_is_named_without_torch_advice(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=16")
    (run / "checkpoints" / "last.pt").write_bytes(b"\x80\x02not a zip")
    before = _files(run)
    assert main(["resume", str(run), "--runs-dir", str(tmp_path / "elsewhere")]) == 2
    err = capsys.readouterr().err
    best_step = torch.load(run / "checkpoints" / "best.pt", weights_only=True)["step"]
    assert "last.pt cannot be read" in err and f"--checkpoint best (continue from best.pt, step {best_step})" in err
    assert "weights_only=False" not in err and "Traceback" not in err
    assert _files(run) == before


@pytest.mark.parametrize("damage", ["no config", "corrupt config", "invalid config", "no status"])
def test_resume_refuses_a_folder_that_holds_no_valid_run(tmp_path, capsys, damage):
    runs = tmp_path / "runs"
    if damage == "no config":  # `lab resume ../../etc`: any directory was trained into
        target = tmp_path / "etc"
        target.mkdir()
        (target / "passwd").write_text("root:x:0:0")
    else:
        target = _train(runs, "train.max_steps=8")
        if damage == "corrupt config":
            (target / "config.json").write_text("{half")
        elif damage == "invalid config":
            (target / "config.json").write_text(json.dumps({"config": {"model": {"depth": -4}}}))
        else:
            (target / "status.json").unlink()
    before = _files(target)
    relative = os.path.relpath(target)
    assert main(["resume", relative, "--runs-dir", str(runs)]) == 2
    assert "error:" in capsys.readouterr().err
    assert _files(target) == before and not (target / "lock").exists()


def test_a_run_id_is_looked_up_in_the_runs_folder_not_the_current_one(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    run = _train(runs, "train.max_steps=8")
    decoy = tmp_path / "cwd" / run.name  # a folder of the same name where the command is typed
    decoy.mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cwd")
    assert main(["resume", run.name, "--runs-dir", str(runs), "train.max_steps=16", "--no-progress"]) == 0
    assert not any(decoy.iterdir()) and json.loads((run / "status.json").read_text())["step"] == 16


def test_settings_of_the_model_or_data_cannot_change_on_resume(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=8")
    before = _files(run)
    for override in ("model.depth=5", "data.n=512", "train.batch_size=8", "train.seed=3"):
        assert main(["resume", run.name, override, "--runs-dir", str(tmp_path)]) == 2
        assert "cannot change on resume" in capsys.readouterr().err
    assert _files(run) == before


def test_a_diverged_run_continues_with_a_lower_learning_rate(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=16")
    assert main(["resume", run.name, "train.lr=50", "train.max_steps=200", "--runs-dir", str(tmp_path),
                 "--no-progress"]) == 1
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "diverged" and "lower the learning rate (train.lr=50)" in status["message"]
    assert main(["resume", run.name, "train.lr=0.01", "--runs-dir", str(tmp_path), "--no-progress"]) == 0
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 200
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["train"]["lr"] == 0.01
    assert [c["changes"]["train.lr"]["to"] for c in config["resume_changes"]] == [50, 0.01]
    lrs = [r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "step"]
    assert lrs[-1] == 0.01  # the optimizer took the new rate, not the one saved in its checkpoint


def test_restart_keeps_the_earlier_attempt_under_history(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=16")
    before = _files(run)
    (run / "checkpoints" / "last.pt").unlink()
    assert main(["resume", run.name, "--restart", "--runs-dir", str(tmp_path), "--no-progress"]) == 0
    (attempt,) = (run / "history").iterdir()
    kept = _files(attempt)
    for name, data in before.items():
        if name.parts[0] not in ("config.json", "checkpoints") or name.name == "best.pt":
            assert kept[name] == data
    assert json.loads((run / "status.json").read_text())["step"] == 16


def test_a_second_process_cannot_train_a_run_and_a_stale_lock_is_taken_over(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=8")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"host": socket.gethostname(), "pid": holder.pid, "since": 0}
        (run / "lock").write_text(json.dumps(lock))
        before = _files(run)
        assert main(["resume", run.name, "train.max_steps=16", "--runs-dir", str(tmp_path)]) == 2
        assert f"being trained by process {holder.pid} on this host" in capsys.readouterr().err
        assert _files(run) == before
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone (killed with its lock in place): the lock is stale and taken over
    assert main(["resume", run.name, "train.max_steps=16", "--runs-dir", str(tmp_path), "--no-progress"]) == 0
    assert not (run / "lock").exists() and json.loads((run / "status.json").read_text())["step"] == 16


@pytest.mark.parametrize("override, message", [
    (["configs/ra_fc_digits.yaml", "data.classes=11"], "classes=11: this dataset has 10 classes"),
    (["configs/ra_fc_digits.yaml", "data.train_fraction=1.0"], "as a config: data.train_fraction"),
    (["configs/ra_fc_digits.yaml", "data.classes=1"], "data.classes=1 keeps one class"),
    (["configs/spiral.yaml", "data.train_fraction=1.0"], "leaves no test samples"),
    (["configs/ra_fc_digits.yaml", "train.engine=loader", "train.batch_size=4096"], "fewer than one update's batch"),
])
def test_errors_in_data_or_config_come_before_any_run_folder(tmp_path, capsys, override, message):
    runs = tmp_path / "runs"
    assert main(["train", *override, "train.max_steps=2", "--runs-dir", str(runs), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("text, message", [
    ("model:\n  depth: [3\n", "is not readable YAML (line 3, column 1)"),
    ("- model\n- data\n", "must hold a mapping of sections"),
])
def test_a_config_file_that_is_not_a_yaml_mapping_is_a_clear_error(tmp_path, capsys, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    assert main(["train", str(config), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(config) in err
    assert not (tmp_path / "runs").exists()


def test_unreadable_images_are_all_named_before_training(tmp_path, capsys):
    root = tmp_path / "images"
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), np.uint8)).save(root / label / f"{i}.png")
    bad = [root / "a" / "<img src=x onerror=alert(1)>.png", root / "b" / "empty.png"]
    bad[0].write_bytes(b"not a png")
    bad[1].write_bytes(b"")
    runs = tmp_path / "runs"
    assert main(["train", "configs/ra_fc_digits.yaml", "data.name=image_folder", f"data.root={root}",
                 "train.engine=loader", "train.batch_size=4", "data.workers=0", "--runs-dir", str(runs),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "2 of 14 image files cannot be read" in err and all(str(p) in err for p in bad)
    assert not runs.exists() or not any(runs.iterdir())


def test_a_failure_after_the_folder_exists_leaves_a_complete_failed_folder(tmp_path):
    class Crash(Callback):
        def on_step_end(self, trainer, loss):
            if trainer.step == 3:
                raise OSError("disk full")

    cfg = load_config("configs/spiral.yaml", ["model.depth=2", "model.width=4", "data.n=128"])
    run = RunStore(tmp_path).create("crash")
    with pytest.raises(OSError, match="disk full"):
        train_and_evaluate(cfg, run, callbacks=[Crash()], progress=False)
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "failed" and status["message"] == "OSError: disk full" and status["step"] == 3
    assert config_of_run(run).model.depth == 2 and not (run.path / "lock").exists()


def test_train_into_a_folder_that_holds_another_run_is_refused(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=8")
    before = _files(run)
    assert main(["train", *SMALL, "--run-dir", str(run)]) == 2
    assert "is not a fresh run folder" in capsys.readouterr().err and _files(run) == before


def test_a_checkpoint_that_does_not_fit_the_model_is_refused_and_moves_nothing(tmp_path, capsys):
    run = _train(tmp_path, "train.max_steps=16")
    torch.save({"model": {"nope.weight": torch.zeros(2)}, "optimizer": {}, "step": 8},
               run / "checkpoints" / "best.pt")  # another model's weights
    before = _files(run)
    assert main(["resume", run.name, "--checkpoint", "best", "train.lr=0.01", "--runs-dir", str(tmp_path)]) == 2
    assert "does not fit the model" in capsys.readouterr().err
    assert _files(run) == before  # last.pt not set aside, no resume change recorded, no TensorBoard file


def test_a_sweep_member_cannot_be_resumed_while_its_sweep_trains(tmp_path):
    from lab.runfolder.lock import RunLock, RunLocked
    from lab.sweeps import create_sweep, plan_sweep, train_sweep

    plan = plan_sweep("configs/spiral.yaml", ["model.depth=2", "model.width=4", "data.n=128",
                                              "model.alpha_min=1.0,0.5", "model.shortcut=linear"])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    with RunLock(runs[1].path), pytest.raises(RunLocked, match="already being trained by this process"):
        train_sweep(plan, folder, runs, progress=False)  # a member held elsewhere: the sweep trains nothing
    assert not (runs[0].path / "metrics.jsonl").exists() and not (runs[0].path / "lock").exists()


@pytest.mark.parametrize("entry", ["metrics.jsonl", "checkpoints", "history"])
def test_a_run_holding_a_link_is_refused_before_anything_is_written(tmp_path, capsys, entry):
    run = _train(tmp_path / "runs", "train.max_steps=8")
    outside = tmp_path / "outside"
    outside.mkdir()
    target = run / entry
    if target.exists():
        target.rename(outside / entry)
    target.symlink_to(outside / entry)
    before = _files(outside)
    assert main(["resume", run.name, "--runs-dir", str(tmp_path / "runs"), "train.max_steps=16"]) == 2
    assert "symbolic links" in capsys.readouterr().err and _files(outside) == before


def test_the_runs_folder_itself_is_no_run_dir(tmp_path, capsys):
    _train(tmp_path, "train.max_steps=8")
    assert main(["train", *SMALL, "--run-dir", str(tmp_path)]) == 2
    assert "is not a fresh run folder" in capsys.readouterr().err and not (tmp_path / "config.json").exists()


def _entries(folder):
    """Every path below ``folder`` (files, folders, links, pipes) with its kind and, for a file, its bytes."""
    return {p.relative_to(folder): (p.is_symlink(), p.is_fifo(), p.is_dir(), p.read_bytes() if p.is_file() and
                                    not p.is_symlink() else None) for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("kind, message", [("fifo", "metrics.jsonl (a named pipe)"),
                                           ("folder", "metrics.jsonl (a folder)"),
                                           ("link", "symbolic links (metrics.jsonl)")])
def test_a_run_whose_metrics_are_not_a_file_is_refused_and_keeps_its_state(tmp_path, capsys, kind, message):
    """The attack: ``metrics.jsonl`` replaced by a named pipe, a folder or a link. The resume was refused only once it
    had started, with a traceback, and the run was marked failed; now it is refused before the run is touched."""
    runs = tmp_path / "runs"
    run = _train(runs, "train.max_steps=8")
    metrics = run / "metrics.jsonl"
    (tmp_path / "elsewhere.jsonl").write_bytes(metrics.read_bytes())
    metrics.unlink()
    {"fifo": lambda: os.mkfifo(metrics), "folder": metrics.mkdir,
     "link": lambda: metrics.symlink_to(tmp_path / "elsewhere.jsonl")}[kind]()
    before, outside = _entries(run), (tmp_path / "elsewhere.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["resume", run.name, "--runs-dir", str(runs), "train.max_steps=16"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert _entries(run) == before and (tmp_path / "elsewhere.jsonl").read_bytes() == outside
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    assert [p.name for p in runs.iterdir()] == [run.name]


@pytest.mark.parametrize("entry", ["checkpoints", "snapshots", "figures", "analysis", "history", "metrics.jsonl", "."])
def test_train_into_a_folder_holding_a_link_is_refused_before_training(tmp_path, capsys, entry):
    """The attack: ``lab train --run-dir DIR`` where DIR (or a folder in it) is a link to elsewhere. Training ran and
    only its first write through the link was refused, with a traceback; now nothing is trained or written."""
    elsewhere, made = tmp_path / "elsewhere", tmp_path / "made"
    elsewhere.mkdir()
    made.mkdir()
    run = made / "run"
    if entry == ".":
        run.symlink_to(elsewhere)
    else:
        run.mkdir()
        (run / entry).symlink_to(elsewhere)
    assert main(["train", *SMALL, "train.max_steps=4", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    named = f"{run} is a symbolic link" if entry == "." else f"symbolic links ({entry})"
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in (made.iterdir() if entry == "." else run.iterdir())) == [
        "run" if entry == "." else entry]


def test_train_into_a_folder_whose_checkpoints_are_a_file_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").write_text("")
    assert main(["train", *SMALL, "train.max_steps=4", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "checkpoints (a regular file, not a folder)" in err and "Traceback" not in err, err
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints"]
