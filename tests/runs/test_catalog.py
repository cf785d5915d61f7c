"""Run folders found and summarised for a listing: confinement to the server's folders, sweeps, damaged files, and
reading only what changed."""

import json
import os
import shutil
import time

import pytest

from lab.jobs.watch import WatchedRun, job_for
from lab.runfolder.writes import atomic_write_json
from lab.runs import catalog
from lab.runs.catalog import (
    RunCatalog,
    RunReader,
    find_runs,
    resolve_run_path,
    run_key,
    run_roots,
    run_summary,
)
from lab.runs.store import Run, RunStore
from lab.train.checkpoint import save_checkpoint
from lab.train.stop import STOP_FILE
from lab.ui.pages.runs_scan import Followed, follow


def _run(store: RunStore, name: str = "run", state: str = "running", **status) -> Run:
    run = store.create(name)
    run.write_config({"model": {"name": "residual_mlp", "depth": 4}, "train": {"lr": 0.01}})
    run.write_status(state, f"{state} message", **status)
    return run


def test_roots_are_the_runs_folder_then_lab_run_dirs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_roots(tmp_path / "runs", env=os.pathsep.join([str(a), "", str(b), str(a)])) == \
        [(tmp_path / "runs").resolve(), a.resolve(), b.resolve()]
    assert run_roots(tmp_path / "runs", env="") == [(tmp_path / "runs").resolve()]


def test_paths_resolve_only_inside_the_roots(tmp_path):
    runs, cluster = tmp_path / "runs", tmp_path / "cluster"
    (runs / "mine").mkdir(parents=True)
    (cluster / "exp1").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (runs / "escape").symlink_to(tmp_path / "secret")
    roots = run_roots(runs, env=str(cluster))
    assert resolve_run_path("mine", roots) == (runs / "mine").resolve()
    assert resolve_run_path("exp1", roots) == (cluster / "exp1").resolve()  # looked up in each root in turn
    assert resolve_run_path(str(cluster / "exp1"), roots) == (cluster / "exp1").resolve()
    for outside in (str(tmp_path / "secret"), "../secret", "/etc", str(runs / "escape")):
        with pytest.raises(PermissionError, match="outside the folders this server reads runs from.*LAB_RUN_DIRS"):
            resolve_run_path(outside, roots)
    with pytest.raises(PermissionError):  # the link leads out of the one root
        resolve_run_path("escape", roots[:1])
    with pytest.raises(FileNotFoundError):  # and is never followed: the other root is searched instead
        resolve_run_path("escape", roots)
    with pytest.raises(FileNotFoundError, match="no folder 'nothing'"):
        resolve_run_path("nothing", roots)
    assert run_key(runs / "mine", roots) == "mine" and run_key(cluster / "exp1", roots) == "exp1"
    (runs / "exp1").mkdir()  # now "exp1" would find the runs folder's: the cluster's is named by its full path
    assert run_key(cluster / "exp1", roots) == str((cluster / "exp1").resolve())


def test_runs_sweeps_and_plain_folders_are_found(tmp_path):
    store = RunStore(tmp_path / "runs")
    solo = _run(store, "solo")
    sweep = store.create("s-sweep")
    atomic_write_json(sweep.path / "sweep.json", {"members": []})
    members = [_run(RunStore(sweep.path), f"0{i}-alpha_min-{a}") for i, a in enumerate((1.0, 0.5))]
    (store.root / "empty").mkdir()  # neither a run nor a sweep: not listed
    (store.root / ".hidden").mkdir()
    expected = {solo.id: [solo.path], sweep.id: [m.path for m in members]}  # newest first; members in order
    assert find_runs(store.root) == [p for name in sorted(expected, reverse=True) for p in expected[name]]
    assert find_runs(sweep.path) == [m.path for m in members]
    assert find_runs(solo.path) == [solo.path]
    (store.root / "elsewhere").symlink_to(tmp_path / "outside")
    outside = _run(RunStore(tmp_path / "outside"))
    assert outside.path not in find_runs(store.root, roots=[store.root.resolve()])


def test_a_reproductions_runs_are_found_through_its_folder(tmp_path):
    store = RunStore(tmp_path / "runs")
    folder = store.root / "reproduce-20260101-000000"
    folder.mkdir(parents=True)
    atomic_write_json(folder / "reproduce.json", {"runs": {}})
    runs = [_run(RunStore(folder / "runs"), name) for name in ("mae-a1-s0", "mae-a0.6-s0")]
    expected = sorted(r.path for r in runs)
    assert find_runs(folder) == expected  # the folder opens as one group of its runs
    assert find_runs(store.root) == expected  # and they are listed with the runs folder's own
    (folder / "reproduce.json").unlink()
    (folder / "reproduce.json").symlink_to(tmp_path / "plan.json")  # a link is no plan: not followed
    assert find_runs(folder) == []
    atomic_write_json(folder / "reproduce.json.tmp", {})
    (folder / "reproduce.json").unlink()
    (folder / "reproduce.json.tmp").rename(folder / "reproduce.json")
    outside = tmp_path / "outside"
    _run(RunStore(outside), "foreign")
    (folder / "runs").rename(tmp_path / "kept")
    (folder / "runs").symlink_to(outside)  # a runs/ that leads elsewhere is not followed
    assert find_runs(folder, roots=[store.root.resolve()]) == []


def test_summary_of_a_healthy_run(tmp_path):
    run = _run(RunStore(tmp_path), state="running", step=40, total_steps=100, metrics={"test_acc": 0.5})
    run.append_metrics({"kind": "step", "step": 10, "loss": 0.9, "lr": 0.01, "time": 1.0},
                       {"kind": "eval", "step": 20, "train_acc": 0.7, "test_acc": 0.75, "test_loss": 0.4},
                       {"kind": "step", "step": 40, "loss": 0.3, "lr": 0.005})
    s = run_summary(run.path, now=time.time() + 30)
    assert (s["name"], s["model"], s["state"], s["step"], s["total_steps"]) == (run.id, "residual_mlp", "running", 40,
                                                                                100)
    assert s["metrics"] == {"test_acc": 0.75, "loss": 0.3, "lr": 0.005, "train_acc": 0.7, "test_loss": 0.4}
    assert 29 < s["age_s"] < 35 and s["alive"] and not s["stale"] and s["problems"] == [] and s["records"] == 3
    assert run_summary(run.path, now=time.time() + 300)["stale"], "a running run without a heartbeat for 5 min"
    run.write_status("completed", "done", step=100, total_steps=100, heartbeat=time.time() - 3600)
    assert not run_summary(run.path)["stale"] and not run_summary(run.path)["alive"]


def test_a_damaged_folder_says_what_is_wrong(tmp_path):
    run = RunStore(tmp_path).create("broken")
    (run.path / "status.json").write_text('{"state": "runn')  # torn
    with open(run.path / "metrics.jsonl", "w") as f:
        f.write('{"kind": "step", "step": 5, "loss": 1.5}\nnot json\n[1, 2]\n{"kind": "step", "step": 10, "lo')
    s = run_summary(run.path)
    assert s["state"] == "unknown" and s["model"] == "" and s["metrics"] == {"loss": 1.5} and s["step"] == 5
    assert any(p.startswith("status.json is unreadable") for p in s["problems"]), s["problems"]
    assert "no config.json" in s["problems"] and "2 unreadable lines in metrics.jsonl (skipped)" in s["problems"]
    assert "metrics.jsonl ends in a half-written line (skipped)" in s["problems"]
    (run.path / "status.json").write_text(json.dumps({"state": 3, "step": "x", "metrics": {"a": "b", "c": 1}}))
    (run.path / "config.json").write_text("{}")
    s = run_summary(run.path)
    assert s["state"] == "unknown" and s["step"] == 5 and s["metrics"]["c"] == 1 and "a" not in s["metrics"]
    assert "status.json has no state" in s["problems"] and "config.json holds no config section" in s["problems"]
    (run.path / "status.json").unlink()
    assert "no status.json" in run_summary(run.path)["problems"]
    (run.path / "config.yaml").write_text("model:\n  name: vit\n")  # a child process's config, before config.json
    (run.path / "config.json").unlink()
    assert run_summary(run.path)["model"] == "vit"


def test_unchanged_files_are_not_read_again(tmp_path, monkeypatch):
    run = _run(RunStore(tmp_path), step=1)
    run.append_metrics({"kind": "step", "step": 1, "loss": 1.0})
    reads = []
    real = catalog._read_json
    monkeypatch.setattr(catalog, "_read_json", lambda path: reads.append(path.name) or real(path))
    reader = RunReader(run.path)
    reader.summary()
    reader.summary()
    assert sorted(reads) == ["config.json", "status.json"], "each read once while unchanged"
    run.write_status("running", step=2)
    run.append_metrics({"kind": "step", "step": 2, "loss": 0.5})
    s = reader.summary()
    assert reads.count("status.json") == 2 and reads.count("config.json") == 1
    assert s["step"] == 2 and s["metrics"]["loss"] == 0.5 and s["records"] == 2
    cursor = reader._cursor
    assert not reader.update_metrics() and reader._cursor == cursor
    run.rewind_metrics(1)  # a resumed run rewrites the file: it is read again from the start
    assert reader.update_metrics() and reader.records == 1 and reader.last["loss"] == 1.0


def test_checkpoints_are_listed_with_their_step(tmp_path):
    run = _run(RunStore(tmp_path))
    save_checkpoint(run, {"step": 7, "model": {}}, "last", "best")
    (run.path / "checkpoints" / "junk.pt").write_bytes(b"not a checkpoint")
    found = {c["name"]: c for c in RunReader(run.path).checkpoints()}
    assert set(found) == {"last.pt", "best.pt", "junk.pt"}
    assert found["last.pt"]["step"] == 7 and found["last.pt"]["size"] > 0 and found["junk.pt"]["step"] is None


def test_jobs_are_matched_to_their_folders(tmp_path):
    class Fake:
        def __init__(self, run, runs=()):
            self.run, self.runs = run, runs

    store = RunStore(tmp_path)
    solo, folder, member = store.create("a"), store.create("s"), store.create("m")
    jobs = [Fake(solo), Fake(folder, [member])]
    assert job_for(jobs, solo.path) is jobs[0] and job_for(jobs, member.path) is jobs[1]
    assert job_for(jobs, tmp_path) is None


def test_a_watched_run_is_never_stopped_and_reads_damaged_status(tmp_path):
    run = _run(RunStore(tmp_path))
    job = WatchedRun(run.path)
    assert job.is_alive() and job.status()["state"] == "running"
    job.stop()
    assert not (run.path / STOP_FILE).exists()
    (run.path / "status.json").write_text("garbage")
    assert job.status()["state"] == "unknown" and job.is_alive(), "watched until it has a status"
    run.write_status("failed", "boom")
    assert not job.is_alive() and job.status()["message"] == "boom"


def test_the_catalog_forgets_folders_that_went_away(tmp_path):
    store = RunStore(tmp_path)
    a, b = _run(store, "a"), _run(store, "b")
    cat = RunCatalog()
    assert {s["name"] for s in cat.summaries([store.root])} == {a.id, b.id}
    shutil.rmtree(b.path)
    assert [s["name"] for s in cat.summaries([store.root])] == [a.id] and set(cat.readers) == {a.path}


def test_files_that_are_links_are_not_read(tmp_path):
    """A run folder inside the allowed folders may hold links to files anywhere: none is followed."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("name: secret\n")
    run = RunStore(tmp_path / "runs").create("linked")
    (run.path / "config.yaml").symlink_to(secret)
    (run.path / "status.json").symlink_to(secret)
    if (run.path / "checkpoints").exists():
        (run.path / "checkpoints").rmdir()
    (secret.parent / "last.pt").write_bytes(b"not a checkpoint of this run")
    (run.path / "checkpoints").symlink_to(secret.parent, target_is_directory=True)
    reader = RunReader(run.path)
    config, text, _ = reader.config()
    assert "secret" not in text and config == {} and reader.status()[0]["state"] == "unknown"
    assert reader.checkpoints() == []


def test_a_failed_process_of_a_torchrun_run_is_named_among_the_problems(tmp_path):
    run = _run(RunStore(tmp_path / "runs"))
    (run.path / "failed-rank1.txt").write_text("Traceback (most recent call last):\nOSError: image file is truncated\n")
    problems = run_summary(run.path)["problems"]
    assert problems == ["process rank1 failed: OSError: image file is truncated"]


def _outside_records(tmp_path):
    """A metrics file outside every run folder, which a link inside one points at."""
    outside = tmp_path / "outside" / "records.jsonl"
    outside.parent.mkdir(exist_ok=True)
    outside.write_text("".join(json.dumps({"kind": "step", "step": s, "loss": 42.0}) + "\n" for s in (1, 2, 3)))
    return outside


def test_a_linked_metrics_file_is_named_and_not_read(tmp_path):
    """metrics.jsonl linked to a file outside: neither the listing nor a watching page reads a record of it."""
    run = _run(RunStore(tmp_path / "runs"), "linked")
    (run.path / "metrics.jsonl").symlink_to(_outside_records(tmp_path))
    summary = RunCatalog().summaries([run.path.parent], [run.path.parent.resolve()])[0]
    assert summary["records"] == 0 and summary["metrics"] == {} and summary["step"] is None
    assert summary["problems"] == ["metrics.jsonl is a symbolic link: not read"]
    assert run.read_metrics(0) == ([], 0) and run.read_metrics(7) == ([], 7)
    assert follow(Followed(run.path)).records == []  # what the Runs page draws
    (run.path / "metrics.jsonl").unlink()  # the same records as a file of the run are read
    (run.path / "metrics.jsonl").write_text((tmp_path / "outside" / "records.jsonl").read_text())
    assert [r["step"] for r in follow(Followed(run.path)).records] == [1, 2, 3]
    assert [r["step"] for r in run.read_metrics(0)[0]] == [1, 2, 3] and run_summary(run.path)["problems"] == []


def test_a_folder_whose_only_entry_is_a_link_is_listed_with_the_link_named(tmp_path):
    runs = tmp_path / "runs"
    (runs / "only-a-link").mkdir(parents=True)
    (runs / "only-a-link" / "metrics.jsonl").symlink_to(_outside_records(tmp_path))
    (summary,) = RunCatalog().summaries([runs], [runs.resolve()])
    assert summary["name"] == "only-a-link" and summary["records"] == 0
    assert "metrics.jsonl is a symbolic link: not read" in summary["problems"]


def test_linked_checkpoints_snapshots_and_sweep_files_are_not_followed(tmp_path):
    import numpy as np

    run = _run(RunStore(tmp_path / "runs"))
    outside = tmp_path / "outside"
    outside.mkdir()
    np.savez(outside / "nodes-000000009.npz", step=np.array(9))
    (outside / "best.pt").write_bytes(b"x")
    (run.path / "checkpoints").mkdir(exist_ok=True)
    (run.path / "checkpoints" / "best.pt").symlink_to(outside / "best.pt")
    (run.path / "snapshots").mkdir(exist_ok=True)
    np.savez(run.path / "snapshots" / "nodes-000000002.npz", step=np.array(2))
    (run.path / "snapshots" / "nodes-000000009.npz").symlink_to(outside / "nodes-000000009.npz")
    job = WatchedRun(run.path)
    version, snapshot = job.latest("nodes")
    assert version == 2 and snapshot.step == 2, "the newer snapshot is a link: the newest file is shown"
    assert RunReader(run.path).checkpoints() == []
    assert run_summary(run.path)["problems"] == ["checkpoints/best.pt is a symbolic link: not read"]
    (run.path / "snapshots" / "nodes-000000002.npz").unlink()
    assert job.latest("nodes") is None
    shutil.rmtree(run.path / "snapshots")
    (run.path / "snapshots").symlink_to(outside, target_is_directory=True)
    assert job.latest("nodes") is None
    assert "snapshots is a symbolic link: not read" in run_summary(run.path)["problems"]
    (run.path / "sweep.json").symlink_to(outside / "best.pt")  # not a sweep: the run is still listed, link named
    assert find_runs(run.path) == [run.path]
    assert "sweep.json is a symbolic link: not read" in run_summary(run.path)["problems"]


def test_a_run_folder_that_links_outside_the_roots_is_neither_listed_nor_opened(tmp_path):
    runs = tmp_path / "runs"
    outside = _run(RunStore(tmp_path / "outside"), "theirs")
    _run(RunStore(runs), "mine")
    (runs / "theirs").symlink_to(outside.path, target_is_directory=True)
    roots = run_roots(runs, env="")
    assert [s["name"] for s in RunCatalog().summaries([runs], roots)] == [next(runs.glob("*mine")).name]
    with pytest.raises(PermissionError):
        resolve_run_path("theirs", roots)


def test_a_config_nested_900_deep_or_20000_keys_wide_is_a_problem_of_its_run_not_of_the_listing(tmp_path):
    """The attack: one run folder whose config.json nests 900 levels (every view that walked it raised
    RecursionError, and the Runs table went empty for everyone), another whose config holds 20,000 keys (comparing
    two such runs froze the server for seconds). Each is listed with its problem; the healthy run beside them is
    listed as before, and a config.yaml is held to the same bounds."""
    store = RunStore(tmp_path)
    healthy = _run(store, "healthy")
    deep, wide, yaml_only = (store.create(name) for name in ("deep", "wide", "yaml-only"))
    (deep.path / "config.json").write_text('{"config": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}")
    (wide.path / "config.json").write_text(json.dumps({"config": {f"k{i}": i for i in range(20_000)}}))
    (yaml_only.path / "config.yaml").write_text("a:\n" + "".join(f"  k{i}: {i}\n" for i in range(5000)))
    for run in (deep, wide, yaml_only):
        run.write_status("completed", "done")
    summaries = {r.path.name.split("-", 2)[-1]: run_summary(r.path) for r in (healthy, deep, wide, yaml_only)}
    assert summaries["healthy"]["model"] == "residual_mlp" and summaries["healthy"]["problems"] == []
    assert any("nests deeper than 16 levels" in p for p in summaries["deep"]["problems"]), summaries["deep"]
    assert any("more than 4096 keys and values" in p for p in summaries["wide"]["problems"]), summaries["wide"]
    assert any("more than 4096 keys and values" in p for p in summaries["yaml-only"]["problems"])
    assert RunReader(deep.path).config()[0] == {} and deep.read_config() == {}
    listed = RunCatalog().summaries([tmp_path])  # the Runs table's listing: every run, the healthy one as it is
    assert len(listed) == 4 and any(r["model"] == "residual_mlp" and r["problems"] == [] for r in listed)


def test_a_link_loop_hides_no_run(tmp_path):
    """The attack: two links pointing at each other (and one at its own folder) beside the runs; checking the first
    raised ELOOP, and the whole folder listed no run at all."""
    store = RunStore(tmp_path)
    good = _run(store, "good")
    os.symlink(tmp_path / "loop-b", tmp_path / "loop-a")
    os.symlink(tmp_path / "loop-a", tmp_path / "loop-b")
    assert find_runs(tmp_path) == [good.path] and len(RunCatalog().summaries([tmp_path])) == 1
