"""The sweep job: an alpha_min sweep trained in a thread, rank snapshots, controls, divergence, the manager's bound."""

import math
import time

import numpy as np
import pytest

from lab.config import config_of_run, load_config
from lab.jobs.manager import JobManager, ManagerBusy
from lab.jobs.sweep_job import SweepJob, group_plan, plan_from_config
from lab.runs.store import Run, RunStore
from lab.snapshots.kinds import RANK
from lab.sweeps import create_sweep, plan_sweep, read_sweep
from lab.train import build_model
from lab.train.checkpoint import load_checkpoint
from tests.jobs.helpers import wait_for

CONFIG = "configs/spiral.yaml"
SMALL = ["model.depth=3", "model.width=8", "data.n=512", "train.epochs=1000", "train.eval_every=10",
         "train.log_every=5"]
ALPHAS = "model.alpha_min=1.0,0.8,0.6"


def sweep_job(tmp_path, *overrides, **kwargs) -> SweepJob:
    plan = plan_sweep(CONFIG, [*SMALL, "model.shortcut=linear", *overrides])
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    return SweepJob(plan, folder, runs, **kwargs)


def snapshot_step(job: SweepJob) -> int | None:
    latest = job.latest(RANK)
    return None if latest is None else int(latest[1]["step"])


def test_rank_snapshots_arrive_with_their_shapes_and_increasing_steps(tmp_path):
    job = sweep_job(tmp_path, ALPHAS, "train.max_steps=60", cadence=(5, 0.0)).start()
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = job.is_alive()
        latest = job.latest(RANK)
        if latest is not None and (not seen or latest[0] != seen[-1][0]):
            seen.append((latest[0], int(latest[1]["step"])))
        if not alive:
            break
        time.sleep(0.002)
    assert job.status()["state"] == "completed"
    assert len(seen) >= 2
    assert [v for v, _ in seen] == sorted({v for v, _ in seen})
    assert [s for _, s in seen] == sorted(s for _, s in seen) and seen[-1][1] == 60
    snapshot = job.latest(RANK)[1]
    assert snapshot.kind == RANK and snapshot.step == 60
    K, depths = 3, 4
    for key in ("effective_rank", "eq6_entropy", "probe_acc"):
        assert snapshot[key].shape == (K, depths) and np.isfinite(snapshot[key]).all()
    assert snapshot["pca"].shape == (K, 102, 2) and snapshot["labels"].shape == (102,)  # data.n=512: 102 test points
    assert np.isfinite(snapshot["pearson_r_effective_rank"]) and np.isfinite(snapshot["pearson_r_eq6_entropy"])
    np.testing.assert_allclose(snapshot["alpha_min"], [1.0, 0.8, 0.6])
    assert snapshot["alphas"].shape == (K, 3)
    np.testing.assert_allclose(snapshot["alphas"][:, -1], [1.0, 0.8, 0.6], rtol=1e-6)
    assert snapshot["member_names"].tolist() == [m.name for m in job.plan.members]
    assert snapshot["diverged"].tolist() == [False] * K and snapshot["eval_step"].tolist() == [60] * K
    for split in ("train", "test"):
        expected = [Run(r.path).read_status()["metrics"][f"{split}_acc"] for r in job.runs]
        np.testing.assert_allclose(snapshot[f"{split}_acc"], expected, rtol=1e-6)


def test_pause_step_resume_stop(tmp_path):
    job = sweep_job(tmp_path, ALPHAS, paused=True, cadence=(1000, 0.0)).start()
    assert wait_for(lambda: job.status()["state"] == "paused")
    assert job.status()["step"] == 0 and snapshot_step(job) == 0  # paused before the first step, with its snapshot
    time.sleep(0.3)
    assert job.status()["step"] == 0
    job.step(3)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 3)
    assert snapshot_step(job) == 3  # the paused snapshot is the paused ensemble
    status = job.status()
    assert [m["state"] for m in status["members"]] == ["paused"] * 3
    assert all(Run(r.path).read_status()["state"] == "paused" for r in job.runs)
    job.resume()
    assert wait_for(lambda: job.status()["step"] > 20)
    job.stop()
    assert not job.is_alive()
    status = job.status()
    assert status["state"] == "stopped"
    assert [m["state"] for m in status["members"]] == ["stopped"] * 3
    for run in job.runs:
        member = Run(run.path).read_status()
        assert member["state"] == "stopped" and member["step"] == status["step"]
        assert load_checkpoint(Run(run.path), "last")["step"] == status["step"]
    assert snapshot_step(job) == status["step"]


def test_a_diverging_member_shows_as_diverged_while_the_others_go_on(tmp_path):
    job = sweep_job(tmp_path, "train.optimizer=sgd", "train.lr=0.01,0.05,50", "train.max_steps=80", paused=True,
                    cadence=(1, 0.0)).start()
    assert wait_for(lambda: job.status()["state"] == "paused")
    job.step(40)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 40)
    status = job.status()
    diverged = status["members"][2]
    assert diverged["state"] == "diverged" and 0 <= diverged["step"] < 40
    assert f"diverged at step {diverged['step']}" in diverged["message"] and "train.lr=50" in diverged["message"]
    assert [m["state"] for m in status["members"][:2]] == ["paused", "paused"]
    own = Run(job.runs[2].path).read_status()
    assert own["state"] == "diverged" and own["step"] == diverged["step"]  # written at once, not at the end
    snapshot = job.latest(RANK)[1]
    assert snapshot.step == 40 and snapshot["diverged"].tolist() == [False, False, True]
    assert np.isnan(snapshot["pearson_r_effective_rank"])  # two members left to correlate
    assert np.isfinite(snapshot["effective_rank"][:2]).all() and np.isfinite(snapshot["test_acc"][:2]).all()
    job.resume()
    status = job.wait(60)
    assert status["state"] == "completed" and "1 of 3 members diverged" in status["message"]
    assert [m["state"] for m in status["members"]] == ["completed", "completed", "diverged"]
    assert status["step"] == 80 and job.latest(RANK)[1].step == 80
    assert [m["state"] for m in read_sweep(job.run.path)["members"]] == ["completed", "completed", "diverged"]


def test_every_member_diverging_is_a_diverged_sweep(tmp_path):
    job = sweep_job(tmp_path, "train.optimizer=sgd", "train.lr=40,50", "train.max_steps=40").start()
    status = job.wait(60)
    assert status["state"] == "diverged" and [m["state"] for m in status["members"]] == ["diverged"] * 2


def test_member_folders_and_metrics_read_as_ordinary_runs(tmp_path):
    job = sweep_job(tmp_path, ALPHAS, "train.max_steps=30").start()
    job.wait(60)
    folder = job.run.path
    assert sorted(r.id for r in RunStore(folder).runs()) == sorted(r.id for r in job.runs)
    records, cursor = job.metrics_since(0)
    assert job.metrics_since(cursor) == ([], cursor)
    for k, (member, run) in enumerate(zip(job.plan.members, job.runs, strict=True)):
        run = Run(run.path)
        cfg = config_of_run(run)
        assert cfg == member.config
        model = build_model(cfg)
        model.load_state_dict(load_checkpoint(run, "last")["model"])
        assert model.blocks[-1].alpha == pytest.approx(member.values["model.alpha_min"])
        own, _ = run.read_metrics(0)
        assert [{kk: v for kk, v in r.items() if kk != "member"} for r in records if r["member"] == k] == own
        assert [r["step"] for r in own if r["kind"] == "eval"] == [10, 20, 30]
    assert [r["step"] for r in records] == sorted(r["step"] for r in records)
    assert all(math.isfinite(r.get("loss", 0.0)) for r in records)


def test_metrics_cursor_picks_up_only_new_records(tmp_path):
    job = sweep_job(tmp_path, ALPHAS, paused=True).start()
    assert wait_for(lambda: job.status()["state"] == "paused")
    job.step(10)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 10)
    first, cursor = job.metrics_since(0)
    assert [(r["member"], r["kind"], r["step"]) for r in first] == [
        (k, "step", s) for s in (5, 10) for k in range(3)]  # by step, then member
    job.step(5)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 15)
    more, cursor2 = job.metrics_since(cursor)
    # a job pauses after a step and before that step's evaluation, as a ThreadJob does
    assert [(r["member"], r["kind"], r["step"]) for r in more] == [
        (k, kind, s) for kind, s in (("eval", 10), ("step", 15)) for k in range(3)]
    assert job.metrics_since(0)[0] == first + more and cursor2 == len(first) + len(more)
    job.stop()


def test_on_demand_snapshots_wait_for_a_request(tmp_path):
    job = sweep_job(tmp_path, ALPHAS, paused=True, cadence=(1, 0.0), on_demand=True).start()
    assert wait_for(lambda: job.status()["state"] == "paused")
    assert snapshot_step(job) == 0
    job.step(5)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 5)
    versions = job.latest(RANK)[0]
    assert versions == 2  # the start snapshot and the paused one: nothing in between was asked for
    job.request(RANK)
    job.step(3)
    assert wait_for(lambda: job.status()["state"] == "paused" and job.status()["step"] == 8)
    assert job.latest(RANK)[0] == 4  # the requested snapshot at step 6, then the paused one
    job.stop()


def test_a_failing_snapshot_fails_the_job_and_its_members(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("broken analysis")

    monkeypatch.setattr("lab.reports.sweep_snapshot.sweep_rank_metrics", broken)
    job = sweep_job(tmp_path, ALPHAS).start()
    status = job.wait(60)
    assert status["state"] == "failed" and "broken analysis" in status["message"]
    assert [m["state"] for m in status["members"]] == ["failed"] * 3
    assert isinstance(job.error, RuntimeError)


def test_plan_from_config_matches_the_command_lines_plan():
    cfg = load_config(CONFIG, [*SMALL, "model.shortcut=linear"])
    plan = plan_from_config(cfg, {"model.alpha_min": [1.0, 0.8], "train.lr": [1e-5, 0.01]})
    cli = plan_sweep(CONFIG, [*SMALL, "model.shortcut=linear", "model.alpha_min=1.0,0.8", "train.lr=1.0e-05,0.01"])
    assert [m.config for m in plan.members] == [m.config for m in cli.members]
    assert [m.name for m in plan.members] == [m.name for m in cli.members]
    assert plan.swept == cli.swept and plan.groups == cli.groups == [[0, 1, 2, 3]]
    assert plan.config_path == ""


def test_group_plan_takes_one_ensemble_and_a_job_takes_one_group(tmp_path):
    plan = plan_sweep(CONFIG, [*SMALL, "model.alpha_min=1.0,0.5", "model.depth=2,3"])
    assert plan.groups == [[0, 2], [1, 3]]
    second = group_plan(plan, 1)
    assert [m.name for m in second.members] == [plan.members[1].name, plan.members[3].name]
    assert second.groups == [[0, 1]] and second.swept == {"model.alpha_min": [1.0, 0.5], "model.depth": [3]}
    with pytest.raises(IndexError, match="2 ensemble group"):
        group_plan(plan, 2)
    folder, runs = create_sweep(plan, RunStore(tmp_path))
    with pytest.raises(ValueError, match="group_plan"):
        SweepJob(plan, folder, runs)


def test_the_manager_counts_a_sweep_as_one_job(tmp_path):
    manager = JobManager(tmp_path, max_jobs=2)
    cfg = load_config(CONFIG, [*SMALL, "model.shortcut=linear"])
    sweep = manager.start_sweep((cfg, {"model.alpha_min": [1.0, 0.8, 0.6]}), owner="tab")
    assert isinstance(sweep, SweepJob) and sweep.owner == "tab" and len(sweep.runs) == 3
    assert manager.active() == [sweep]
    solo = manager.start_thread(cfg)
    with pytest.raises(ManagerBusy, match="2 of 2"):  # training jobs hold the slots (a paused one would not)
        manager.start_sweep(plan_sweep(CONFIG, [*SMALL, ALPHAS]))
    solo.stop()
    split = manager.start_sweep(plan_sweep(CONFIG, [*SMALL, ALPHAS, "model.depth=2,3"]), group=1, paused=True)
    assert [config_of_run(r).model.depth for r in split.runs] == [3, 3, 3]
    manager.release_owner("tab")
    assert sweep.wait(60)["state"] == "stopped"
    manager.shutdown()
    assert manager.active() == []
