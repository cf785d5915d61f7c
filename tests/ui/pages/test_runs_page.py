"""The Runs page driven through its parameters: run folders written by the run store or by another process are
listed, opened, followed while they grow, and stopped only when this lab trains them."""

import gc
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import panel as pn
import pytest

from lab.runfolder.writes import atomic_write_json
from lab.runs.store import Run, RunStore
from lab.snapshots.kinds import ALIGNMENT, NODES
from lab.snapshots.snapshot import load_saved
from lab.train.checkpoint import save_checkpoint
from lab.train.stop import STOP_FILE
from lab.ui.pages.runs import RunsPage
from lab.ui.views.run_details import EMPTY
from lab.ui.views.run_views import COLUMNS, format_age, format_clock, format_metrics, format_progress
from tests.jobs.helpers import EVERY_SNAPSHOT_S, tiny
from tests.ui.driving import poll_until, shown
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
STEP = {"kind": "step", "epoch": 0}


def _run(store: RunStore, name: str, state: str = "completed", model: str = "residual_mlp", **status) -> Run:
    run = store.create(name)
    run.write_config({"name": name, "model": {"name": model, "depth": 4}, "train": {"lr": 0.01}})
    run.write_status(state, f"{state}: {name}", **status)
    return run


def _records(n: int = 6) -> list[dict]:
    out = []
    for i in range(1, n + 1):
        out.append({**STEP, "step": 10 * i, "loss": 1.0 / i, "lr": 0.01 * (1 - i / (2 * n)), "time": 1.0})
        if i % 2 == 0:
            out.append({"kind": "eval", "step": 10 * i, "train_loss": 0.9 / i, "test_loss": 1.1 / i,
                        "train_acc": 0.5 + 0.05 * i, "test_acc": 0.45 + 0.05 * i, "probe_top1": 0.2 + 0.1 * i,
                        "rank": 30.0 - i, "rank_layer1": 10.0 + i})
    return out


def _rows(page: RunsPage) -> dict[str, dict]:
    return {row["run"]: row for row in page.table.value.to_dict("records")}


def test_formats():
    assert [format_age(s) for s in (None, 3.2, 125, 7300, 200000)] == ["never", "3 s ago", "2 min ago", "2 h ago",
                                                                      "2 d ago"]
    now = datetime(2026, 12, 1, 18, 42, 5).timestamp()
    assert format_clock(now - 65, now) == "18:41:00" and format_clock(None) == "never"
    assert format_clock(now - 86400, now) == "2026-11-30 18:42"
    assert format_progress(None, None) == "" and format_progress(5, None) == "step 5"
    assert format_progress(30, 120) == "30 / 120 (25%)"
    assert format_metrics({"lr": 1e-4, "test_acc": 0.9531, "zeta": 1.0, "loss": 0.01234}) == \
        "loss 0.01234 · test_acc 0.9531 · lr 1.000e-04"


def test_the_table_lists_runs_and_sweep_members(manager, monkeypatch):
    store = manager.store
    done = _run(store, "done", step=100, total_steps=100, metrics={"test_acc": 0.9})
    done.append_metrics(*_records())
    stale_beat = time.time() - 600
    stale = _run(store, "stale", "running", step=30, total_steps=120, heartbeat=stale_beat)
    fresh = _run(store, "fresh", "running", step=5)
    sweep = store.create("alpha-sweep")
    atomic_write_json(sweep.path / "sweep.json", {"members": []})
    members = [_run(RunStore(sweep.path), f"0{i}-alpha_min-{a}", "queued") for i, a in enumerate((1.0, 0.5))]
    page = RunsPage(manager=manager)
    rows = _rows(page)
    assert set(rows) == {done.id, stale.id, fresh.id, *(f"{sweep.id}/{m.id}" for m in members)}
    assert rows[done.id] == {"run": done.id, "model": "residual_mlp", "state": "completed",
                             "progress": "100 / 100 (100%)", "metrics": "loss 0.1667 · test_acc 0.75",
                             "heartbeat": rows[done.id]["heartbeat"], "problems": ""}
    assert rows[stale.id]["state"] == "running (stale)" and rows[stale.id]["heartbeat"] == format_clock(stale_beat)
    assert rows[stale.id]["progress"] == "30 / 120 (25%)"
    assert rows[fresh.id]["state"] == "running" and rows[fresh.id]["progress"] == "step 5"
    assert rows[f"{sweep.id}/{members[0].id}"]["state"] == "queued"
    # time passing alone changes no row, so the refresh leaves the table as it is (replaced rows are redrawn in the
    # browser, and a click that lands during the redraw is lost)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 30)
    assert not page.refresh()
    monkeypatch.undo()
    # the periodic refresh: a new run appears, a finished one changes in place
    later = _run(store, "later", "running", step=1, total_steps=10)
    fresh.write_status("completed", "done", step=50, total_steps=50)
    assert page.poll()
    rows = _rows(page)
    assert later.id in rows and rows[fresh.id]["state"] == "completed" and rows[fresh.id]["progress"].startswith("50")


def test_added_folders_stay_inside_the_servers_folders(manager, tmp_path, monkeypatch):
    cluster = tmp_path / "cluster"
    remote = _run(RunStore(cluster / "exp1"), "remote", "running", step=3)
    _run(manager.store, "local")
    monkeypatch.setenv("LAB_RUN_DIRS", str(cluster))
    page = RunsPage(manager=manager, folder="exp1")
    assert f"exp1/{remote.id}" in _rows(page) and len(_rows(page)) == 2 and not page.notice.visible
    page.folder = str(tmp_path / "elsewhere")
    assert page.notice.visible and page.notice.alert_type == "danger"
    assert "is outside the folders this server reads runs from" in shown(page.notice)
    assert "LAB_RUN_DIRS" in shown(page.notice) and len(_rows(page)) == 1, "the page lives on without the folder"
    page.folder = "../../etc"
    assert "outside" in shown(page.notice)
    page.folder = "exp2"
    assert "no folder 'exp2'" in shown(page.notice)
    page.folder = str(cluster / "exp1")
    assert len(_rows(page)) == 2 and not page.notice.visible
    # as from a URL: a run inside the server's folders opens, and the refused folder is still named
    page = RunsPage(manager=manager, folder="/etc", run=f"exp1/{remote.id}")
    assert page.follower.job is not None and "Folder not added" in shown(page.notice)
    page.run = "nope"
    assert "Folder not added" in shown(page.notice) and "Run not opened" in shown(page.notice)
    page.folder = "exp1"
    assert "Folder not added" not in shown(page.notice) and "Run not opened" in shown(page.notice)
    page.run = ""
    assert not page.notice.visible
    monkeypatch.delenv("LAB_RUN_DIRS")
    assert "outside" in shown(RunsPage(manager=manager, folder=str(cluster)).notice), "roots are fixed at start"


def test_a_corrupt_folder_is_listed_with_its_problems_and_opened(manager):
    run = manager.store.create("broken")
    (run.path / "status.json").write_text('{"state": "runn')
    with open(run.path / "metrics.jsonl", "w") as f:
        f.write('{"kind": "step", "step": 5, "loss": 1.5}\n{"kind": "step", "step": "x", "loss": null}\nnot json\n'
                '{"kind": "step", "step": 10, "loss": 1.0}\n{"kind": "step", "step": 15, "lo')
    page = RunsPage(manager=manager)
    row = _rows(page)[run.id]
    assert row["state"] == "unknown" and row["model"] == ""
    assert "status.json is unreadable" in row["problems"] and "no config.json" in row["problems"]
    assert "1 unreadable line in metrics.jsonl" in row["problems"]
    assert "half-written line" in row["problems"]
    page.run = run.id
    assert page.curves.live.sources[("step", "loss")].data == {"step": [5, 10], "value": [1.5, 1.0]}
    assert "status.json is unreadable" in shown(page.details.header)
    assert "No readable config" in page.details.config.object
    assert page.follower.job is not None and "unknown" in page.follower.status.message


def test_opening_a_run_draws_its_metrics_file(manager):
    run = _run(manager.store, "curves", "running", step=60, total_steps=100)
    run.append_metrics(*_records())
    save_checkpoint(run, {"step": 60, "model": {}}, "last", "best")
    other = _run(manager.store, "steps-only", "failed")
    other.append_metrics({**STEP, "step": 1, "loss": 2.0}, {**STEP, "step": 2, "loss": 1.0})
    page = RunsPage(manager=manager)
    assert page.details.header.object == EMPTY and not page._plots.objects
    page.run = run.id
    records = run.read_metrics()[0]
    live = page.curves.live.sources
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert live[("step", "loss")].data == {"step": [r["step"] for r in steps], "value": [r["loss"] for r in steps]}
    for field in ("train_loss", "test_loss", "train_acc", "test_acc"):
        assert live[("eval", field)].data == {"step": [r["step"] for r in evals], "value": [r[field] for r in evals]}
    for fig, field, rows in (("lr", "lr", steps), ("probe", "probe_top1", evals), ("rank", "rank", evals),
                             ("rank", "rank_layer1", evals)):
        kind = rows[0]["kind"]
        assert page.curves.extra[fig].sources[(kind, field)].data == \
            {"step": [r["step"] for r in rows], "value": [r[field] for r in rows]}
    titles = [p.object.title.text for row in page._plots for p in row]
    assert titles == ["Loss", "Accuracy", "Learning rate", "Linear probe accuracy", "Effective rank"]
    for row in page._plots:  # ranges around the data
        for pane in row:
            fig = pane.object
            for r in fig.renderers:
                xs, ys = r.data_source.data["step"], r.data_source.data["value"]
                assert fig.x_range.start < min(xs) and max(xs) < fig.x_range.end
                assert fig.y_range.start < min(ys) and max(ys) < fig.y_range.end
    assert "last.pt" in shown(page.details.checkpoints) and "| 60 |" in page.details.checkpoints.object
    assert "name: residual_mlp" in page.details.config.object and "lr: 0.01" in page.details.config.object
    assert page.table.selection == [list(page.table.value["run"]).index(run.id)]
    # the curve grows with the file
    run.append_metrics({**STEP, "step": 70, "loss": 0.1})
    page.poll()
    assert live[("step", "loss")].data["step"][-1] == 70
    # a resumed run rewrites its metrics file: the curves are drawn again from it
    run.rewind_metrics(20)
    page.poll()
    assert live[("step", "loss")].data["step"] == [10, 20]
    # a row clicked opens its run; one without evaluations shows no empty accuracy figure
    page.table.selection = [list(page.table.value["run"]).index(other.id)]
    assert page.run == other.id
    assert [p.object.title.text for row in page._plots for p in row] == ["Loss"]
    assert page.follower.status.alert.visible and "failed: steps-only" in shown(page.follower.status.alert)


def test_a_run_written_by_another_process_is_followed_while_it_trains(manager, tmp_path):
    log = open(tmp_path / "train.log", "w")  # noqa: SIM115 - closed below, after the process ends
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab", "train", "configs/spiral.yaml", "model.depth=4", "model.width=8",
         "data.n=2048", "train.epochs=100000", "train.max_steps=200000", "train.log_every=5",
         "train.eval_every=100", "--runs-dir", str(manager.store.root), "--no-progress"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "LAB_RUNS_DIR": str(tmp_path / "x")})
    # every wait is on the process's own progress; its bound is only there to end the test should the process
    # hang, so it allows for a loaded machine (starting Python and importing torch alone can take a minute there)
    # while a crashed process fails the wait at once, with its log
    def until(predicate) -> bool:
        return poll_until(page, lambda: predicate() or proc.poll() is not None, timeout=300) and proc.poll() is None

    def train_log() -> str:
        return (tmp_path / "train.log").read_text()[-3000:]

    try:
        page = RunsPage(manager=manager)
        assert until(lambda: len(page.table.value) == 1), train_log()
        page.run = page.table.value["run"][0]
        loss = page.curves.live.sources[("step", "loss")]
        assert until(lambda: len(loss.data["step"]) >= 5), train_log()
        seen = len(loss.data["step"])
        assert until(lambda: len(loss.data["step"]) >= seen + 5), f"the curve does not grow; {train_log()}"
        assert page.follower.job.status()["state"] == "running"
        assert page._stop_button.disabled and "Watch-only" in shown(page._stop_note)
        page.param.trigger("stop")
        assert "Not stopped. Watch-only" in shown(page.notice)
        assert not (page._path / STOP_FILE).exists() and proc.poll() is None
        (page._path / STOP_FILE).touch()  # its owner stops it
        assert proc.wait(300) == 0, train_log()
        assert poll_until(page, lambda: "**stopped**" in page.follower.status.message, timeout=30)
        records = page.follower.job.run.read_metrics()[0]
        assert loss.data["step"] == [r["step"] for r in records if r["kind"] == "step"]
        assert "stopped" in _rows(page)[page.run]["state"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_a_lab_job_can_be_stopped_and_a_foreign_run_cannot(manager):
    job = manager.start_thread(tiny(name="mine", **{"train.epochs": 100000}))
    foreign = _run(manager.store, "foreign", "running", step=3)
    page = RunsPage(manager=manager, run=foreign.id)
    page.param.trigger("stop")
    assert page.notice.visible and "Not stopped. Watch-only" in shown(page.notice)
    assert not (foreign.path / STOP_FILE).exists() and job.is_alive()
    del page  # a page thrown away (a notebook cell run again) stops its follower's job: a watched run is not its
    gc.collect()
    assert not (foreign.path / STOP_FILE).exists() and foreign.read_status()["state"] == "running"
    page = RunsPage(manager=manager)
    page.run = job.run.id
    assert poll_until(page, lambda: page.curves.live.points()["step:loss"] > 0)
    assert not page._stop_button.disabled and "Started by this lab" in shown(page._stop_note)
    page.param.trigger("stop")
    assert poll_until(page, lambda: not job.is_alive() and "**stopped**" in page.follower.status.message)
    page.poll()
    assert page._stop_button.disabled and "has ended (stopped)" in shown(page._stop_note)


def test_url_state_bad_names_and_the_notebook_cell(manager):
    run = _run(manager.store, "url")
    run.append_metrics(*_records(2))
    page = RunsPage(manager=manager, run=run.id)
    assert page.url_parameters == ("folder", "run", "compare")
    assert page.curves.live.points()["step:loss"] == 2 and run.id in shown(page.details.header)
    for bad, why in (("../../etc", "outside"), ("nothing", "no folder"), ("", None)):
        page.run = bad
        assert page.follower.job is None and page.details.header.object == EMPTY and not page._plots.objects
        assert (why in shown(page.notice)) if why else True
    (manager.store.root / "plain").mkdir()
    page.run = "plain"
    assert "is not a run folder" in shown(page.notice)
    cell = page.__panel__()
    assert isinstance(cell, pn.Row) and page.views() is page._main


@pytest.mark.parametrize("state", ["diverged", "failed"])
def test_a_failed_run_says_why(manager, state):
    run = _run(manager.store, state, state, step=12, total_steps=100)
    run.write_status(state, f"loss is nan at step 12 ({state})", step=12, total_steps=100)
    page = RunsPage(manager=manager, run=run.id)
    assert page.follower.status.alert.visible and "loss is nan at step 12" in shown(page.follower.status.alert)
    assert "loss is nan at step 12" in shown(page.details.header)


def test_the_newest_reconstruction_picture_of_an_mae_run_is_shown(manager):
    from PIL import Image

    run = _run(manager.store, "mae", "running", model="mae_vit_tiny_patch4_32", step=20, total_steps=100)
    run.append_metrics(*_records(2))
    page = RunsPage(manager=manager)
    page.run = run.id
    assert not page.details.figure.visible  # no picture yet: nothing shown
    (run.path / "figures").mkdir()
    for step, colour in ((10, "red"), (20, "blue")):
        Image.new("RGB", (8, 4), colour).save(run.path / "figures" / f"reconstruction-{step:09d}.png")
    page.poll()
    page.refresh()
    assert page.details.figure.visible and "step 20" in page.details.caption.object
    assert page.details.picture.object == (run.path / "figures" / "reconstruction-000000020.png").read_bytes()


def test_a_linked_metrics_file_draws_nothing_and_is_named(manager, tmp_path):
    run = _run(manager.store, "linked", "running", step=3)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    (run.path / "metrics.jsonl").symlink_to(outside)
    page = RunsPage(manager=manager, run=run.id)
    page.poll()
    assert page.follower.job is not None and sum(page.curves.points().values()) == 0 and not page._plots.objects
    assert "metrics.jsonl is a symbolic link: not read" in shown(page.details.header)
    assert _rows(page)[run.id]["problems"] == "metrics.jsonl is a symbolic link: not read"


def test_the_tables_cells_are_text_without_html_tooltips(manager):
    """Tabulator's cell tooltip (``tooltip: true``) sets the value as HTML: the table wraps long cells instead."""
    page = RunsPage(manager=manager)
    assert page.table.formatters == dict.fromkeys(COLUMNS, {"type": "textarea"})
    assert "tooltip" not in json.dumps(page.table.get_root().configuration), "the browser gets no cell tooltip"


def test_runs_compared_are_overlaid_labelled_by_what_differs(manager):
    store = manager.store
    a, b = _run(store, "a"), _run(store, "b")
    b.write_config({"name": "b", "model": {"name": "residual_mlp", "depth": 8}, "train": {"lr": "<b>0.01</b>"}})
    a.append_metrics(*_records(4))
    b.append_metrics(*_records(6))
    page = RunsPage(manager=manager, compare=f"{a.id}, {b.id}, ../outside")
    views = page.comparison
    assert views.layout.visible and "Not compared" in shown(page.notice) and "outside" in shown(page.notice)
    loss = views.figures["loss"]
    assert loss.lines.data["label"] == ["depth=4, lr=0.01", "depth=8, lr=<b>0.01</b>"]
    assert [len(x) for x in loss.lines.data["xs"]] == [4, 6]
    assert views.column("model.depth") == ["4", "8"] and views.column("step") == ["40", "60"]
    assert all(f["type"] == "textarea" for f in views.table.formatters.values())  # a value is text, never markup
    assert "`train.lr`" in views.summary.object
    b.append_metrics({**STEP, "step": 70, "loss": 0.01})  # followed as the files grow
    page.refresh()
    assert [len(x) for x in loss.lines.data["xs"]] == [4, 7]
    page.compare = a.id
    assert not views.layout.visible  # one run is no comparison


def test_a_sweep_folder_opens_as_the_comparison_of_its_members(manager):
    sweep = manager.store.create("alpha-sweep")
    atomic_write_json(sweep.path / "sweep.json", {"members": []})
    members = []
    for i, a in enumerate((1.0, 0.5)):
        run = _run(RunStore(sweep.path), f"0{i}-alpha_min-{a}")
        run.write_config({"name": run.id, "model": {"name": "residual_mlp", "alpha_min": a}})
        run.append_metrics(*_records(2))
        members.append(run)
    page = RunsPage(manager=manager, run=sweep.id)
    assert page.compare.split(",") == [f"{sweep.id}/{m.id}" for m in members]
    assert page.comparison.figures["loss"].lines.data["label"] == ["alpha_min=1", "alpha_min=0.5"]
    assert "is a sweep: its 2 members are compared" in shown(page.notice) and page.job is None


def test_a_reproduction_folder_opens_as_the_comparison_of_its_runs(manager):
    folder = manager.store.root / "reproduce-20260101-000000"
    folder.mkdir(parents=True)
    atomic_write_json(folder / "reproduce.json", {"runs": {}})
    runs = []
    for a in (1.0, 0.6):
        run = _run(RunStore(folder / "runs"), f"mae-a{a:g}-s0")
        run.write_config({"name": run.id, "model": {"name": "residual_mlp", "alpha_min": a}})
        run.append_metrics(*_records(2))
        runs.append(run)
    page = RunsPage(manager=manager, run=folder.name)
    assert sorted(page.compare.split(",")) == sorted(f"{folder.name}/runs/{r.id}" for r in runs)
    assert len(page.comparison.figures["loss"].lines.data["label"]) == 2
    assert "its 2 runs compared" in shown(page.notice) and page.job is None


def test_a_runs_saved_snapshots_replay_read_only_in_the_views_that_drew_them(manager):
    import numpy as np

    from lab.config import ExperimentConfig, apply_overrides
    from lab.snapshots.builders import alignment_builder
    from lab.train.build import build_data, build_model

    job = manager.start_thread(tiny(**{"train.max_steps": 40}), cadence={"nodes": (10, 0.0)},
                               disk_every_s=EVERY_SNAPSHOT_S)
    assert job.wait(60)["state"] == "completed"
    page = RunsPage(manager=manager, run=job.run.id)
    saved = page.saved
    assert saved.layout.visible and list(saved.kind.options.values()) == ["nodes"]
    assert saved.step.options == [0, 10, 20, 30, 40] and saved.step.value == 40  # the newest first
    assert saved.views[NODES].grid.object.title.text == "step 40" and "at step 40" in saved.title.object
    assert len(saved.views[NODES].decision.object.renderers) == 2, "the decision map under the run's training points"
    saved.step.value = 10
    assert saved.views[NODES].grid.object.title.text == "step 10" and "at step 10" in saved.title.object
    before = sorted(p.name for p in (job.run.path / "snapshots").iterdir())
    # an alignment run (snapshots as the Alignment page or `lab train --snapshot-every` write them)
    cfg = apply_overrides(ExperimentConfig(), {"name": "fc", "model.name": "fc_resnet", "model.depth": 3,
                                               "model.width": 16, "data.name": "digits"})
    data = build_data(cfg)
    build = alignment_builder(data, k=4, inputs=16, nc_inputs=50, baseline_trials=2)
    other = manager.store.create("fc")
    other.write_config({"name": "fc", "model": {"name": "fc_resnet"}, "data": {"name": "digits"}})
    for step in (0, 5):
        other.save_snapshot("alignment", step, {**build(build_model(cfg, data)), "step": np.int64(step)})
    page.run = other.id
    assert list(saved.kind.options.values()) == ["alignment"] and saved.step.options == [0, 5]
    assert saved.views[ALIGNMENT].views.points()["trajectories"] > 0 and "at step 5" in saved.title.object
    page.run = ""
    assert not saved.layout.visible
    assert sorted(p.name for p in (job.run.path / "snapshots").iterdir()) == before, "read-only"


def test_another_run_opened_replays_its_own_snapshots_also_at_the_same_steps(manager):
    """Two runs with snapshots at the same steps: opening the second draws its snapshot, not the first one's again;
    moving the slider draws once."""
    import numpy as np

    jobs = []
    for seed in (0, 1):
        jobs.append(manager.start_thread(tiny(**{"train.max_steps": 20, "model.seed": seed}),
                                         cadence={"nodes": (10, 0.0)}, disk_every_s=EVERY_SNAPSHOT_S))
        assert jobs[-1].wait(60)["state"] == "completed"
    page = RunsPage(manager=manager, run=jobs[0].run.id)
    saved = page.saved
    drawn, show = [], saved.views[NODES].show
    saved.views[NODES].show = lambda snapshot, *args: (drawn.append(snapshot["maps"]), show(snapshot, *args))
    page.run = jobs[1].run.id
    assert saved.step.options == [0, 10, 20] and len(drawn) == 1
    assert np.array_equal(drawn[0], load_saved(jobs[1].run, "nodes", 20)[1]["maps"])
    assert not np.array_equal(drawn[0], load_saved(jobs[0].run, "nodes", 20)[1]["maps"])
    saved.step.value = 10
    assert len(drawn) == 2 and saved.views[NODES].grid.object.title.text == "step 10"


def test_a_sweep_of_residual_mlps_opens_with_the_rank_views_of_its_last_checkpoints(manager):
    from lab.sweeps import create_sweep, plan_sweep, train_sweep

    plan = plan_sweep(None, ["model.depth=4", "model.width=8", "data.n=512", "train.epochs=2",
                             "model.alpha_min=1.0,0.6,0.4"])
    folder, runs = create_sweep(plan, manager.store)
    train_sweep(plan, folder, runs, progress=False)
    page = RunsPage(manager=manager, run=folder.id)
    snapshot = page.sweep.views.snapshot
    assert [str(n) for n in snapshot["member_names"]] == [r.id for r in runs]
    assert snapshot["alpha_min"].tolist() == pytest.approx([1.0, 0.6, 0.4])
    assert snapshot["effective_rank"].shape == (3, 5) and (snapshot["test_acc"] > 0.5).all()
    assert page.sweep.layout.visible and all(n > 0 for n in page.sweep.views.counts().values())
    assert "with the rank views of their last checkpoints" in shown(page.notice)
    page.run = ""
    assert not page.sweep.layout.visible


def test_hostile_entries_are_shown_as_problems_and_never_raised_into_a_watcher(manager, tmp_path):
    """A NUL byte in ?run=, a snapshot that is encrypted, lacks an array or holds a 0-d one, a picture over its cap:
    each is said on the page, and the page goes on."""
    import numpy as np

    page = RunsPage(manager=manager, run="a\x00b")
    assert "Run not opened" in shown(page.notice) and "NUL character" in shown(page.notice)
    page.compare = "x\x00y,z"
    assert "Not compared" in shown(page.notice)
    page.folder = "f\x00"
    assert "Folder not added" in shown(page.notice)
    page.param.update(folder="", compare="")
    job = manager.start_thread(tiny(**{"train.max_steps": 20}), cadence={"nodes": (10, 0.0)},
                               disk_every_s=EVERY_SNAPSHOT_S)
    assert job.wait(60)["state"] == "completed"
    run, snapshots = job.run, job.run.path / "snapshots"
    good = (snapshots / "nodes-000000020.npz").read_bytes()
    np.savez(snapshots / "nodes-000000030.npz", weights=np.zeros((1, 1, 1)), decision=np.zeros((2, 2)), step=30)
    np.savez(snapshots / "nodes-000000040.npz", maps=np.float32(1), weights=np.zeros((1, 1, 1)),
             decision=np.zeros((2, 2)), step=40)
    encrypted = bytearray(good)
    encrypted[encrypted.find(b"PK\x01\x02") + 8] |= 1
    (snapshots / "nodes-000000050.npz").write_bytes(bytes(encrypted))
    page.run = run.id
    saved = page.saved
    assert saved.step.options[-1] == 50
    for step, why in ((50, "is encrypted"), (40, "'maps' is float32 of shape ()"), (30, "has no array 'maps'")):
        saved.step.value = step
        assert saved.problem.visible and why in shown(saved.problem), step
    saved.step.value = 20
    assert not saved.problem.visible and saved.views[NODES].grid.object.title.text == "step 20"
    figures = run.path / "figures"
    figures.mkdir()
    with open(figures / "reconstruction-000000020.png", "wb") as f:
        f.truncate(150 * 10**6)  # sparse: 150 MB that cost no disk
    page.refresh()
    assert page.details.figure.visible and page.details.picture.object is None
    assert "not shown" in shown(page.details.caption) and "150.0 MB" in shown(page.details.caption)


def test_a_served_page_reads_in_a_worker_and_its_callbacks_never_wait_on_the_disk(manager, monkeypatch):
    """Served, the page's periodic tick only starts scans and shows finished ones: a scan that takes long (a slow
    disk, a huge folder) costs the session's thread nothing."""
    import threading

    from lab.ui.pages import runs as runs_module

    _run(manager.store, "a").append_metrics(*_records(3))
    monkeypatch.setattr(runs_module, "can_schedule", lambda: False)
    page = RunsPage(manager=manager)
    page._served = True  # as served: scans go to the pool
    release, readers = threading.Event(), []
    real = runs_module.scan

    def slow(catalog, request):
        readers.append(threading.current_thread())
        release.wait(60)  # a tick that waited for the scan would return only after this, and find it done
        return real(catalog, request)

    monkeypatch.setattr(runs_module, "scan", slow)
    page.run = page.table.value["run"][0]
    for _ in range(5):
        page._tick()
    # the ticks returned while the one scan they started still waits on the disk, in another thread
    assert page._scan is not None and not page._scan.done()
    assert wait_until(lambda: len(readers) == 1, 30) and readers[0] is not threading.current_thread()
    release.set()
    page._scan.result(30)
    page._tick()
    assert page.curves.live.points()["step:loss"] == 3 and "a" in shown(page.details.header)


def test_a_page_over_thousands_of_runs_shows_its_first_page_before_it_has_read_them_all(manager, monkeypatch):
    """The first scan of a page reads only the runs of the table's first page, newest first, so that page appears
    before the whole folder is read (3,000 cold run folders took seconds); the scan right after lists them all."""
    from lab.ui.pages import runs as runs_module

    names = [_run(manager.store, f"r{i:03d}").id for i in range(2 * runs_module.PAGE_ROWS + 5)]
    monkeypatch.setattr(runs_module, "session_id", lambda: "a browser's session")  # served: scans in the pool
    monkeypatch.setattr(runs_module, "weak_periodic", lambda *args: None)  # this test ticks the page itself
    page = RunsPage(manager=manager)
    read: list[int] = []
    real = runs_module.scan

    def counted(catalog, request):
        out = real(catalog, request)
        read.append(len(out.summaries))
        return out

    monkeypatch.setattr(runs_module, "scan", counted)
    page._tick()
    page._scan.result(30)
    page._tick()  # shows the first page and starts the full scan at once
    assert read == [runs_module.PAGE_ROWS] and len(page.summaries) == runs_module.PAGE_ROWS
    assert set(page.summaries) == set(sorted(names)[-runs_module.PAGE_ROWS:]), "the newest runs first"
    page._scan.result(30)
    page._tick()
    assert read == [runs_module.PAGE_ROWS, len(names)] and len(page.table.value) == len(names)
