"""The Diffusion page driven through its parameters: one U-ViT per α_min, their schedules drawn before training, the
settings checked, and what it exports."""

import pandas as pd
import pytest
import yaml

from lab.nn.vit_block import sublayer_scales
from lab.ui.pages.diffusion import DiffusionPage
from tests.ui.driving import kill_child_then_start_again, shown


def test_members_and_their_schedules_are_drawn_before_training(manager):
    page = DiffusionPage(manager=manager)
    views = page.diffusion
    assert views.alpha_mins == [1.0, 0.8, 0.7, 0.6] and len(views.sample_figs) == len(views.probe_figs) == 4
    ys = views.schedule_src.data["ys"]
    assert [len(y) for y in ys] == [14] * 4  # U-ViT-tiny: 7 blocks of two residual sub-layers
    assert ys[2][0] == 1.0 and ys[2][-1] == pytest.approx(0.7)  # the paper's: 1 → α_min at the decoder's last
    assert ys[2] == pytest.approx([a for s in sublayer_scales("sublayer", 7, 0.7) for a in s[:2]])
    cfg = page.member_configs()[3]
    assert (cfg.model.name, cfg.model.alpha_min, cfg.train.task, cfg.data.name) == ("uvit_tiny", 0.6, "diffusion",
                                                                                    "digits")
    # evaluations fall on epoch ends, where the probes run: 1,617 training digits are 12 batches of 128
    assert (cfg.train.eval_every, cfg.train.probe_every, cfg.train.fd_samples, cfg.train.probe_samples) == (
        15 * 12, 15, 200, 500)
    page.alpha_mins = "1.0, 0.5"
    assert views.alpha_mins == [1.0, 0.5] and len(views.members) == 2


@pytest.mark.parametrize(("text", "why"), [("1.0", "2 to 6"), ("1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4", "2 to 6"),
                                           ("1.0, 1.2", r"in \[0, 1\]")])
def test_bad_settings_are_named_and_start_nothing(manager, text, why):
    page = DiffusionPage(manager=manager)
    page.alpha_mins = text
    assert pytest.raises(ValueError, page.alpha_min_values).match(why)
    assert "Invalid settings" in shown(page.follower.status.alert)
    page.param.trigger("play")
    assert page.job is None and not list(manager.store.runs()), "nothing starts on invalid settings"


def test_exports_say_what_was_trained(manager):
    page = DiffusionPage(manager=manager, alpha_mins="1.0, 0.7", conditional=True)
    cfg = yaml.safe_load(page.config_yaml().getvalue())
    assert cfg["sweep"] == {"model.alpha_min": [1.0, 0.7]} and cfg["model"]["num_classes"] == 10
    assert cfg["model"]["shortcut"] == "sublayer" and cfg["train"]["sampler"] == "ode"
    page.diffusion.extend(1, [{"kind": "step", "step": 5, "loss": 1.0},
                              {"kind": "eval", "step": 12, "test_loss": 0.8, "digits_fd": 300.0, "probe_top1": 0.5}])
    table = pd.read_csv(page.evaluations_csv())
    assert table.to_dict("records") == [{"alpha_min": 0.7, "step": 12, "test_loss": 0.8, "digits_fd": 300.0,
                                         "probe_top1": 0.5}]
    assert page.diffusion.curves["digits_fd"][2].data["y"] == [300.0]  # a dot for the one evaluation


def test_with_every_slot_taken_nothing_starts_and_the_page_says_why(manager):
    from tests.jobs.helpers import tiny

    other = manager.start_thread(tiny())  # the one slot
    page = DiffusionPage(manager=manager, alpha_mins="1.0, 0.7")
    page.param.trigger("play")
    assert "busy: 1 of 1" in shown(page.follower.status.alert) and other.run.id in shown(page.follower.status.alert)
    assert page.job is None and [r.id for r in manager.store.runs()] == [other.run.id]


def test_a_run_of_two_u_vits_trains_in_lockstep_and_reset_stops_both(manager):
    from tests.ui.driving import poll_until

    page = DiffusionPage(manager=manager, alpha_mins="1.0, 0.7", steps=10, fd_samples=0, probe_samples=50)
    page.param.trigger("step")  # both start paused, then train one step each
    assert len(page.members) == 2 and len(page._statuses) == 2
    assert poll_until(page, lambda: all(f.job.status().get("step") == 1 for f in page.members))
    jobs = [f.job for f in page.members]
    assert {j.group for j in jobs} == {jobs[0].group} and jobs[0].group is not None
    page.param.trigger("reset")  # asks both to stop, and waits for neither: the page is ready at once
    assert len(page.members) == 1 and len(page._statuses) == 1
    assert all(j.wait(60)["state"] == "stopped" for j in jobs) and not any(j.is_alive() for j in jobs)


def test_u_vits_in_lockstep_train_in_one_child_process_and_a_killed_one_is_reported(tmp_path):
    """With the manager's jobs in child processes both U-ViTs train in one child, still in lockstep; killed, both
    show as failed with its exit code, and the page (the server) goes on."""

    from lab.jobs.child import ChildJob
    from lab.jobs.manager import JobManager
    from tests.ui.driving import poll_until

    manager = JobManager(tmp_path / "runs", max_jobs=1, processes=True)
    try:
        page = DiffusionPage(manager=manager, alpha_mins="1.0, 0.7", steps=2000, fd_samples=0, probe_samples=50)
        page.param.trigger("step")  # both start paused, then train one step each
        jobs = [f.job for f in page.members]
        assert all(isinstance(j, ChildJob) for j in jobs) and jobs[0].proc is jobs[1].proc
        assert poll_until(page, lambda: all(j.status().get("step") == 1 for j in jobs), timeout=60)
        page.param.trigger("play")
        assert poll_until(page, lambda: all(j.status().get("step", 0) > 3 for j in jobs), timeout=60)
        kill_child_then_start_again(page, jobs)
    finally:
        manager.shutdown()
