import json
import os

import numpy as np
import pytest
import torch

from lab.runfolder.entries import EntryError
from lab.runs.store import (
    CheckpointError,
    Run,
    RunFolderError,
    RunStore,
    default_runs_dir,
    end_state,
    error_text,
    sanitize_name,
)
from lab.train.checkpoint import load_checkpoint, save_checkpoint


def test_run_ids_are_sanitised_and_stay_inside_the_runs_folder(tmp_path):
    store = RunStore(tmp_path / "runs")
    for name in ("../../etc/passwd", "/abs/path", "a b\\c", "..", "", "\0x"):
        run = store.create(name)
        assert run.path.parent == store.root
        assert run.path.resolve().is_relative_to(store.root.resolve())
    assert not (tmp_path / "etc").exists()
    assert sanitize_name("../../etc/passwd") == "etc-passwd"
    with pytest.raises(ValueError, match="invalid run id"):
        store.open("../x")


def test_ids_are_unique_and_listed_newest_first(tmp_path, monkeypatch):
    from lab.runs import store as store_module

    monkeypatch.setattr(store_module, "_stamp", lambda: "20261203-120000")  # both within one second, always
    store = RunStore(tmp_path)
    a, b = store.create("same"), store.create("same")
    assert a.id != b.id and b.id.endswith("-2")
    assert [r.id for r in store.runs()] == sorted([a.id, b.id], reverse=True)
    assert store.open(a.id) == a


def test_default_runs_dir_follows_environment(runs_dir):
    assert default_runs_dir() == runs_dir
    assert RunStore().root == runs_dir


def test_metrics_reader_skips_half_written_last_line(tmp_path):
    run = Run(tmp_path)
    run.append_metrics({"step": 1}, {"step": 2})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "lo')  # a writer mid-line
    records, cursor = run.read_metrics()
    assert [r["step"] for r in records] == [1, 2]
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('ss": 0.5}\nnot json\n')
    more, cursor2 = run.read_metrics(cursor)
    assert more == [{"step": 3, "loss": 0.5}] and cursor2 > cursor  # the garbage line is skipped


def test_rewinding_metrics_sets_later_records_aside_and_loses_none(tmp_path):
    run = Run(tmp_path)
    run.append_metrics(*({"step": s} for s in range(10)))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 10, "lo')  # torn by a kill
    original = (tmp_path / "metrics.jsonl").read_bytes()
    aside = run.rewind_metrics(4)
    assert [r["step"] for r in run.read_metrics()[0]] == [0, 1, 2, 3, 4]
    assert aside.parent == tmp_path / "history" and aside.read_bytes() == original
    assert run.rewind_metrics(4) is None and len(list((tmp_path / "history").iterdir())) == 1  # nothing to set aside


def test_status_and_metrics_are_strict_json_with_non_finite_numbers_named(tmp_path):
    run = Run(tmp_path)
    run.write_status("diverged", "loss is nan", step=3, metrics={"train_loss": float("nan"), "test_acc": 0.5,
                                                                 "grad": [1.0, float("inf")]})
    run.append_metrics({"kind": "eval", "step": 3, "test_loss": float("-inf"), "rank": np.float32("nan")})
    text = (tmp_path / "status.json").read_text() + (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    strict = json.JSONDecoder(parse_constant=lambda name: pytest.fail(f"bare {name} in JSON"))
    status = strict.decode((tmp_path / "status.json").read_text())
    assert status["metrics"] == {"train_loss": None, "test_acc": 0.5, "grad": [1.0, None]}
    assert status["nonfinite"] == {"metrics.train_loss": "nan", "metrics.grad[1]": "inf"}
    (record,) = run.read_metrics()[0]
    assert record["test_loss"] is None and record["nonfinite"] == {"test_loss": "-inf", "rank": "nan"}


def test_run_folder_entries_that_are_links_are_not_followed(tmp_path):
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "m.jsonl").write_text('{"step": 1, "loss": 42}\n')
    (outside / "s.json").write_text('{"state": "completed", "message": "from outside"}')
    (outside / "c.json").write_text('{"config": {"name": "outside"}}')
    run = Run(tmp_path / "run")
    run.path.mkdir()
    for entry, target in (("metrics.jsonl", "m.jsonl"), ("status.json", "s.json"), ("config.json", "c.json")):
        (run.path / entry).symlink_to(outside / target)
    assert run.read_metrics() == ([], 0)  # as if absent: nothing from outside is read
    assert run.read_status()["state"] == "unknown"
    assert run.read_config() == {}
    with pytest.raises(RunFolderError, match="config.json cannot be read"):
        run.config_record()
    (run.path / "checkpoints").mkdir()
    torch.save({"step": 1}, outside / "last.pt")
    run.checkpoint_path("last").symlink_to(outside / "last.pt")
    with pytest.raises(CheckpointError, match="symbolic link"):
        load_checkpoint(run, "last")


def test_missing_or_corrupt_config_is_an_error_not_the_defaults(tmp_path):
    run = Run(tmp_path)
    with pytest.raises(RunFolderError, match="no config.json"):
        run.config_record()
    (tmp_path / "config.json").write_text("{torn")
    with pytest.raises(RunFolderError, match="cannot be read as JSON"):
        run.config_record()
    (tmp_path / "config.json").write_text('{"versions": {}}')
    with pytest.raises(RunFolderError, match="no config section"):
        run.config_record()


def test_restart_sets_everything_recorded_aside(tmp_path):
    run = RunStore(tmp_path).create("r")
    run.write_config({"name": "r"})
    run.write_status("completed", "done", step=5)
    run.append_metrics({"step": 5})
    save_checkpoint(run, {"step": 5}, "last", "best")
    run.save_snapshot("nodes", 1, {"a": np.zeros(2)})
    aside = run.set_aside()
    assert sorted(p.name for p in run.path.iterdir()) == ["checkpoints", "config.json", "history", "snapshots"]
    assert not any(any(run.path.joinpath(d).iterdir()) for d in ("checkpoints", "snapshots"))
    assert sorted(p.name for p in aside.iterdir()) == ["checkpoints", "metrics.jsonl", "snapshots", "status.json"]
    assert torch.load(aside / "checkpoints" / "best.pt", weights_only=True) == {"step": 5}


def test_status_round_trip_and_missing_status(tmp_path):
    run = Run(tmp_path)
    assert run.read_status()["state"] == "unknown"
    (tmp_path / "status.json").write_text("{broken")
    assert run.read_status()["state"] == "unknown"
    run.write_status("running", "hello", step=3)
    assert {k: run.read_status()[k] for k in ("state", "message", "step")} == {
        "state": "running", "message": "hello", "step": 3}
    with pytest.raises(ValueError, match="unknown run state"):
        run.write_status("exploded")


def test_checkpoints_are_atomic_and_load_weights_only(tmp_path):
    run = Run(tmp_path)
    state = {"model": {"w": torch.arange(3.0)}, "step": 7}
    path = save_checkpoint(run, state)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    loaded = load_checkpoint(run)
    assert loaded["step"] == 7 and torch.equal(loaded["model"]["w"], torch.arange(3.0))
    # a torn temp file from a writer killed mid-write does not affect the checkpoint
    (path.parent / ".last.pt.abc.tmp").write_bytes(b"partial")
    assert load_checkpoint(run)["step"] == 7


def test_corrupt_and_missing_checkpoints_name_the_file(tmp_path):
    run = Run(tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint at .*last.pt"):
        load_checkpoint(run)
    run.checkpoint_path().parent.mkdir(parents=True)
    run.checkpoint_path().write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"checkpoint .*last\.pt is corrupt"):
        load_checkpoint(run)


def test_checkpoint_refuses_pickled_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    run = Run(tmp_path)
    run.checkpoint_path().parent.mkdir(parents=True)
    torch.save({"x": Evil()}, run.checkpoint_path())
    with pytest.raises(CheckpointError, match="corrupt or not a lab checkpoint"):
        load_checkpoint(run)


def test_snapshots_latest_and_retention(tmp_path):
    run = Run(tmp_path)
    for v in range(100):
        run.save_snapshot("nodes", v, {"a": np.full(3, v, np.float32)})
    run.prune_snapshots("nodes", keep_last=3, keep_history=10)
    versions = run.snapshot_versions("nodes")
    assert len(versions) == 13 and versions[-3:] == [97, 98, 99] and versions[0] == 0
    version, arrays = run.load_snapshot("nodes")
    assert version == 99 and arrays["a"][0] == 99
    (tmp_path / "snapshots" / "nodes-000000099.npz").write_bytes(b"torn")
    assert run.load_snapshot("nodes")[0] == 98  # a corrupt newest snapshot falls back to the previous
    assert run.load_snapshot("missing") is None


def test_config_json_records_versions(tmp_path):
    run = Run(tmp_path)
    run.write_config({"name": "x"})
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["config"] == {"name": "x"} and "torch" in data["versions"] and "git_commit" in data
    assert run.read_config() == {"name": "x"}


def test_snapshots_that_are_links_are_not_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    np.savez(outside / "nodes-000000007.npz", secret=np.arange(3))
    run = RunStore(tmp_path / "runs").create("r")
    run.save_snapshot("nodes", 1, {"a": np.zeros(2)})
    (run.path / "snapshots" / "nodes-000000007.npz").symlink_to(outside / "nodes-000000007.npz")
    assert run.snapshot_versions("nodes") == [1]
    with pytest.raises(EntryError, match="symbolic link: not followed"):  # asked for by its step: says why not
        run.load_snapshot("nodes", 7)
    assert run.load_snapshot("nodes")[0] == 1
    linked = RunStore(tmp_path / "runs").create("l")
    (linked.path / "snapshots").rmdir()
    (linked.path / "snapshots").symlink_to(outside)
    assert linked.snapshot_versions("nodes") == [] and linked.load_snapshot("nodes", 7) is None


def test_end_state_names_a_finished_run():
    assert end_state(40, 40) == ("completed", "completed 40 steps")
    assert end_state(12, 40) == ("stopped", "stopped at step 12")


def test_a_run_folders_subfolders_replaced_by_links_are_never_written_through(tmp_path):
    """The attack on a folder a run will write again (``lab resume``, a relaunched reproduction): its
    ``checkpoints/``, ``snapshots/`` and ``analysis/`` replaced by links to another folder. Each write is refused and
    the other folder stays empty; the run's own files are written as before."""
    from lab.runfolder.writes import atomic_write_json  # every analysis writer's

    run = RunStore(tmp_path / "runs").create("r")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for sub in ("checkpoints", "snapshots", "analysis"):
        if (run.path / sub).exists():
            (run.path / sub).rmdir()
        (run.path / sub).symlink_to(elsewhere)
    with pytest.raises(EntryError, match="is a link or not a folder"):
        save_checkpoint(run, {"model": {}, "step": 1}, "last")
    with pytest.raises(EntryError, match="is a link or not a folder"):
        run.save_snapshot("nodes", 1, {"maps": np.zeros((2, 2), dtype=np.float32)})
    with pytest.raises(EntryError, match="is a link or not a folder"):
        atomic_write_json(run.analysis_path("alignment.json"), {"a": 1})
    assert list(elsewhere.iterdir()) == []
    run.write_status("running", "still writes its own files")
    assert run.read_status()["message"] == "still writes its own files"


def test_a_killed_writers_half_written_files_are_removed_when_the_run_starts_again(tmp_path):
    """A run killed while writing a checkpoint leaves ``.last.pt.<random>.tmp`` behind (109 MB after four kills);
    the next start of its training removes such files, and nothing else, never through a link."""
    from lab.train.recorder import RunRecorder

    run = RunStore(tmp_path / "runs").create("r")
    half = [run.path / "checkpoints" / ".last.pt.a1b2c3.tmp", run.path / ".status.json.x9.tmp"]
    for path in half:
        path.write_bytes(b"\0" * 1000)
    kept = run.path / "checkpoints" / "notes.tmp"  # not a temp file of the writer's
    kept.write_text("mine")
    victim = tmp_path / "victim.tmp"
    victim.write_text("precious")
    (run.path / "checkpoints" / ".link.pt.zz.tmp").symlink_to(victim)

    class _Trainer:
        step, epoch, total_steps, last_eval = 0, 0, 10, {}

    recorder = RunRecorder(run, tensorboard=False)
    recorder.on_train_start(_Trainer())
    recorder.close()
    assert not any(p.exists() for p in half) and kept.read_text() == "mine" and victim.read_text() == "precious"


def test_an_error_text_is_its_type_and_a_bounded_message():
    assert error_text(KeyError("x")) == "KeyError: 'x'" and error_text(MemoryError()) == "MemoryError"
    assert error_text(ValueError("y" * 700), chars=600) == f"ValueError: {'y' * 600} … (100 more characters)"
