import numpy as np
import pytest
import yaml
from PIL import Image

from lab.config import ExperimentConfig, from_dict
from lab.shortcuts import alphas
from lab.ui.pages.playground import PlaygroundPage
from tests.jobs.helpers import tiny, wait_for
from tests.ui.driving import kill_child_then_start_again, poll_until, shown


def small_page(manager, **params):
    return PlaygroundPage(manager=manager, **{"depth": 4, "width": 5, "n": 400, **params})


def test_settings_build_the_config_and_the_alpha_chart_follows(manager):
    page = small_page(manager, shortcut="linear", alpha_min=0.25)
    cfg = page.config()
    assert (cfg.model.depth, cfg.model.width, cfg.model.shortcut, cfg.model.alpha_min) == (4, 5, "linear", 0.25)
    assert page.alpha_chart.alphas.tolist() == pytest.approx(alphas("linear", 4, 0.25))
    page.param.update(depth=6, alpha_min=0.5)
    assert page.alpha_chart.alphas.tolist() == pytest.approx(alphas("linear", 6, 0.5))
    assert page.snapshot["maps"].shape == (7, 5, 50, 50)  # rebuilt: a fresh snapshot of the new shape
    assert page.param.layer_range.bounds == (0, 7)


def test_view_settings_redraw_without_touching_the_job(manager):
    page = small_page(manager)
    layouts = page.grid.layouts
    full_width = page.grid.pane.pixels.shape[1]
    page.layer_range = (1, 3)
    assert page.grid.layouts == layouts + 1  # a new layout: its labels and hover boxes go with the pixels
    narrowed = page.grid.pane.pixels
    assert narrowed.shape[1] < full_width and page.job is None
    assert [label for _, label in page.grid.pane.layout["columns"]] == ["1", "2", "out"]
    page.normalize = "global"  # the same layout: new pixels only
    assert page.grid.layouts == layouts + 1 and not np.array_equal(page.grid.pane.pixels, narrowed)


def test_training_streams_snapshots_pause_step_reset(manager):
    page = small_page(manager, snapshot_every=2)
    page.param.trigger("play")
    assert poll_until(page, lambda: page.snapshot is not None and int(page.snapshot["step"]) >= 4)
    first = page.grid.pane.pixels.copy()
    first_step = int(page.snapshot["step"])
    assert poll_until(page, lambda: int(page.snapshot["step"]) >= first_step + 6)
    second = page.grid.pane.pixels
    assert not np.array_equal(first, second)  # the grid changed between two snapshots
    assert page.grid.layouts == 1  # ... in the same layout: only the pixels, ranges and title were sent
    page.param.trigger("play")  # pause
    assert poll_until(page, lambda: page.job.status()["state"] == "paused")
    step = page.job.status()["step"]
    page.param.trigger("step")
    assert poll_until(page, lambda: page.job.status()["step"] == step + 1 and
                       page.job.status()["state"] == "paused")
    assert page.history == 0 and len(page.history_steps) > 1  # live: 0 snapshots back
    assert page.param.history.bounds == (-(len(page.history_steps) - 1), 0)
    page.depth = 5  # a training setting while a run is in progress asks first
    assert page.hint.visible and "Reset" in shown(page.hint) and page.job.is_alive()
    job = page.job
    page.param.trigger("reset")  # the page drops the run at once; the run ends after its step, unwaited for
    assert page.job is None and page.snapshot["maps"].shape[0] == 6
    assert wait_for(lambda: not job.is_alive(), timeout=60) and job.status()["state"] == "stopped"


def test_busy_manager_is_reported(manager):
    other = manager.start_thread(tiny())  # training: it holds the one slot (a paused job holds none)
    page = small_page(manager)
    page.param.trigger("play")
    assert page.job is None and "busy: 1 of 1" in shown(page.follower.status.alert)
    other.stop()


def test_resuming_with_every_slot_taken_says_so_and_stays_paused(manager):
    page = small_page(manager)
    page.param.trigger("step")  # a paused run, one step trained
    assert poll_until(page, lambda: page.job.status()["step"] == 1 and page.job.status()["state"] == "paused")
    other = manager.start_thread(tiny())  # a paused job holds no slot: another run takes the only one
    for action in ("play", "step"):
        page.param.trigger(action)  # refused: the message is shown, no exception escapes the handler
        page.poll()
        assert page.follower.status.alert.visible and page.follower.status.alert.alert_type == "warning"
        assert "busy: 1 of 1" in shown(page.follower.status.alert), action
        assert page.job.status()["state"] == "paused" and page.job.status()["step"] == 1
    other.stop()
    page.param.trigger("play")  # the slot is free again: the run goes on and the message goes
    assert poll_until(page, lambda: page.job.status()["state"] == "running" and not page.follower.status.alert.visible)
    page.param.trigger("reset")


def test_exports(manager):
    page = small_page(manager)
    png = Image.open(page.grid_png())
    assert png.mode == "RGBA" and png.size[0] > png.size[1] > 0
    html = page.plots_html().getvalue().decode()
    assert "Residual Lab Playground" in html and "Bokeh" in html
    with np.load(page.snapshot_npz()) as z:
        assert z["maps"].shape == (5, 5, 50, 50)
    assert from_dict(ExperimentConfig, yaml.safe_load(page.config_yaml())) == page.config()
    assert isinstance(page.settings_json(), str)


def test_diverged_banner_keeps_message():
    from lab.ui.views.status import JobStatus

    status = JobStatus()
    status.show({"state": "diverged", "message": "training diverged at step 7: loss is nan.", "step": 7,
                 "total_steps": 100})
    assert status.alert.visible and "step 7" in shown(status.alert) and status.alert.alert_type == "danger"


def test_out_of_range_url_values_are_clamped_and_named(manager):
    page = small_page(manager)
    page.apply_url({"depth": 99999, "alpha_min": 5, "shortcut": "linear"})
    assert (page.depth, page.alpha_min, page.shortcut) == (64, 1.0, "linear")
    assert page.notice.visible and page.notice.alert_type == "warning"
    assert "depth must be in [1, 64]; using 64" in shown(page.notice)
    assert "alpha_min must be in [0.0, 1.0]; using 1.0" in shown(page.notice)
    assert page.snapshot["maps"].shape[0] == 65  # the model was rebuilt at the value in use


def test_curves_and_status_follow_the_run(manager):
    page = small_page(manager, snapshot_every=2)
    page.param.trigger("play")
    assert poll_until(page, lambda: page.curves.points()["eval:test_acc"] >= 2)
    assert page.curves.points()["step:loss"] >= 10 and "running" in page.follower.status.message
    page.param.trigger("reset")
    assert page.curves.points()["step:loss"] == 0 and page.job is None


def test_history_replays_a_recorded_snapshot_and_returns_to_live(manager):
    page = small_page(manager, snapshot_every=2)
    page.param.trigger("play")
    # snapshots are written to the run folder every 2 s: wait for two on disk
    assert poll_until(page, lambda: len(page.job.run.snapshot_versions("nodes")) >= 2, timeout=90)
    page.poll()
    first_on_disk = page.job.run.snapshot_versions("nodes")[0]
    page.history = -(len(page.history_steps) - 1)  # the oldest snapshot received
    replayed = int(page.snapshot["step"])
    assert replayed <= page.history_steps[0] or replayed == first_on_disk
    assert poll_until(page, lambda: len(page.history_steps) > 5)
    assert int(page.snapshot["step"]) == replayed  # new snapshots arrive, the replayed one stays on screen
    page.history = 0
    page.poll()
    assert int(page.snapshot["step"]) >= page.history_steps[-2]  # live again
    page.param.trigger("reset")


def test_the_history_slider_takes_the_snapshots_drawn_between_polls_at_the_next_poll(manager):
    page = small_page(manager, snapshot_every=2)
    page.param.trigger("play")
    assert poll_until(page, lambda: len(page.history_steps) >= 2)
    page.param.trigger("play")  # pause
    assert poll_until(page, lambda: page.job.status()["state"] == "paused")
    received = len(page.history_steps)
    assert page.param.history.bounds == (-(received - 1), 0) and not page.param.history.constant
    page.param.trigger("step")
    # drawn as it lands (as a served page or a kernel draws it, without a poll): the snapshot is live on screen, the
    # slider's range waits for the next poll
    assert wait_for(lambda: page.follower._draw_snapshots() and len(page.history_steps) > received)
    assert int(page.snapshot["step"]) == page.history_steps[-1]
    assert page.param.history.bounds == (-(received - 1), 0)
    page.poll()
    assert page.param.history.bounds == (-(len(page.history_steps) - 1), 0)
    page.param.trigger("reset")


def test_alpha_min_without_a_decayed_schedule_is_pointed_out(manager):
    page = small_page(manager, shortcut="identity", alpha_min=0.5)
    assert page.hint.visible and "alpha_min has no effect with the identity schedule" in shown(page.hint)
    page.shortcut = "linear"
    assert not page.hint.visible and page.alpha_chart.alphas.tolist() == pytest.approx(alphas("linear", 4, 0.5))


def test_grid_width_fits_the_grid_into_a_narrower_view(manager):
    page = small_page(manager, depth=32, width=32)
    wide = page.grid.pane.pixels.shape[1]
    page.grid_width = 700  # a view setting: a redraw, no new model
    narrow = page.grid.pane.pixels.shape[1]
    assert narrow <= 700 < wide <= 1040 and page.job is None
    assert Image.open(page.grid_png()).size[0] == narrow  # exports follow the view


def test_the_playground_trains_in_a_child_process_and_a_killed_one_is_reported(tmp_path):
    """With the manager's jobs in child processes the page draws the same snapshots; a child killed outright shows as
    failed with its exit code, and the page (the server) goes on: a new run starts."""

    from lab.jobs.child import ChildJob
    from lab.jobs.manager import JobManager

    manager = JobManager(tmp_path / "runs", max_jobs=1, processes=True)
    try:
        page = small_page(manager, snapshot_every=2)
        page.param.trigger("play")
        assert isinstance(page.job, ChildJob)
        assert poll_until(page, lambda: page.snapshot is not None and int(page.snapshot["step"]) >= 4, timeout=60)
        page.param.trigger("play")  # pause, then one step, across the process boundary
        assert poll_until(page, lambda: page.job.status()["state"] == "paused")
        step = page.job.status()["step"]
        page.param.trigger("step")
        assert poll_until(page, lambda: page.job.status()["step"] == step + 1)
        kill_child_then_start_again(page, [page.job])
    finally:
        manager.shutdown()


def test_live_snapshots_are_built_at_the_resolution_the_grid_is_drawn_at(manager):
    """Node maps cost the training child a forward pass over R² points per snapshot: a run's snapshots have twice the
    pixels of a drawn tile per axis (26 for the default view's 13-pixel tiles), between 24 and the paper's 50."""
    assert PlaygroundPage(manager=manager)._live_resolution() == 26  # 33 layers × 32 nodes in 1040 px
    assert small_page(manager)._live_resolution() == 50  # 5 layers × 5 nodes: large tiles, the paper's 50 points
    page = small_page(manager, depth=16, width=8, grid_width=400, snapshot_every=2)  # 17 layers in 400 px
    resolution = page._live_resolution()
    assert 24 <= resolution < 50 and page.snapshot["maps"].shape[-1] == 50  # the untrained model: the paper's
    page.param.trigger("play")
    assert poll_until(page, lambda: int(page.snapshot["step"]) > 0)
    assert page.snapshot["maps"].shape[-1] == resolution == page.snapshot["decision"].shape[-1]
    page.param.trigger("reset")
