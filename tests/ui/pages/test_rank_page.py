"""The Rank page driven through its parameters: an α_min sweep drawn before and while it trains."""


import numpy as np
import pytest
import yaml

from lab.ui.pages.rank import RankPage, parse_alpha_mins
from tests.ui.driving import kill_child_then_start_again, poll_until, shown

SMALL = {"n": 1024, "depth": 6, "width": 8, "epochs": 200, "every_s": 0.2}


def previewed(page: RankPage) -> RankPage:
    """``page`` once its untrained members (computed in a bounded child) have been drawn."""
    assert page.preview.wait(120), shown(page.preview.alert)
    return page


def test_alpha_min_lists_are_checked():
    assert parse_alpha_mins("1.0, 0.8;0.5") == [1.0, 0.8, 0.5]
    cases = (("1.0", "2 to 16"), ("1.0, x", "numbers"), ("1.0, 1.5", r"in \[0, 1\]"), ("0.5, 0.5", "repeated"))
    for text, why in cases:
        with pytest.raises(ValueError, match=why):
            parse_alpha_mins(text)


def test_untrained_members_are_drawn_and_settings_rebuild(manager):
    page = previewed(RankPage(manager=manager, **SMALL))
    counts = page.rank.counts()
    assert counts == {"by_layer": 6, "schedules": 6, "rank_time": 6, "probe_time": 6, "points": 6, "accuracy": 12,
                      "embeddings": 6}
    snapshot = page.rank.snapshot
    assert snapshot["effective_rank"].shape == (6, 7) and snapshot["alphas"].shape == (6, 6)
    np.testing.assert_allclose(snapshot["alphas"][-1], np.linspace(1.0, 0.5, 6), atol=1e-6)  # linear: 1 → α_min
    page.alpha_mins = "1.0, 0.6, 0.2"
    previewed(page)
    assert page.rank.counts()["by_layer"] == 3
    page.alpha_mins = "nonsense"
    assert "alpha_mins must be numbers" in shown(page.follower.status.alert)
    page.param.trigger("play")
    assert page.job is None, "nothing starts on invalid settings"
    page.alpha_mins = "1.0, 0.5"
    page.measure = "eq6_entropy"
    assert page.rank.by_layer.title.text.endswith("Eq. 6 entropy H")
    assert page.rank.by_layer.yaxis.axis_label == "Eq. 6 entropy H"
    cfg = yaml.safe_load(page.config_yaml().getvalue())
    assert cfg["sweep"] == {"model.alpha_min": [1.0, 0.5]} and cfg["model"]["shortcut"] == "linear"


def test_titles_name_the_supervised_figure_and_colour_has_a_legend(manager):
    page = previewed(RankPage(manager=manager, **SMALL))
    views = page.rank
    assert "Figure 9" in views.caption.object and "Figure 6" not in "".join(
        f.title.text for f in (views.rank_time, views.probe_time, views.rank_probe))
    assert views.by_layer_src.data["label"] == ["1", "0.9", "0.8", "0.7", "0.6", "0.5"]
    assert all(legend.title == "α_min" for legend in views.legends) and len(views.legends) == 6


def test_resuming_with_every_slot_taken_says_so(manager):
    from tests.jobs.helpers import tiny

    page = RankPage(manager=manager, **SMALL)
    page.param.trigger("play")
    assert poll_until(page, lambda: page.job.status()["state"] == "running")
    page.param.trigger("play")  # pause: the sweep gives its slot up
    assert poll_until(page, lambda: page.job.status()["state"] == "paused")
    other = manager.start_thread(tiny())
    page.param.trigger("play")
    page.poll()
    assert page.follower.status.alert.visible and "busy: 1 of 1" in shown(page.follower.status.alert)
    assert page.job.status()["state"] == "paused"
    other.stop()
    page.param.trigger("reset")


def test_sweep_trains_and_every_view_follows(manager):
    page = RankPage(manager=manager, **SMALL)
    page.param.trigger("play")
    assert poll_until(page, lambda: len(page.rank.history["step"]) >= 3)
    assert all(n > 0 for n in page.rank.counts().values()), page.rank.counts()
    steps = page.rank.history["step"]
    assert steps == sorted(steps) and steps[-1] > 0
    assert len(page.rank.rank_time_src.data["xs"][0]) == len(steps), "one point per snapshot and member"
    status = page.job.status()
    assert len(status["members"]) == 6 and status["state"] in ("running", "paused", "completed")
    assert "Pearson r" in page.rank.rank_probe.title.text
    page.param.trigger("reset")
    previewed(page)
    assert page.job is None and page.rank.history["step"] == [0], "back to the untrained members"


def test_members_that_do_not_learn_are_named(manager):
    page = RankPage(manager=manager, **{**SMALL, "optimizer": "sgd", "lr": 1.0, "alpha_mins": "1.0, 0.1",
                                        "epochs": 3})
    page.param.trigger("play")
    assert poll_until(page, lambda: page.notice.visible and "Not every member learned" in shown(page.notice))
    assert "α_min" in shown(page.notice)


def test_a_generative_task_sweeps_the_digits_and_judges_members_by_their_loss(manager):
    page = previewed(RankPage(manager=manager, **{**SMALL, "task": "masked", "alpha_mins": "1.0, 0.5",
                                                  "epochs": 4}))
    cfg = page.config()
    assert (cfg.data.name, cfg.train.task, cfg.name) == ("digits", "masked", "rank-masked-unet-digits")
    # the paper's structure: the encoder decays, a decoder of half its depth at α = 1, U-Net skips
    assert cfg.model.get("decoder_depth") == SMALL["depth"] // 2 and cfg.model.get("unet_skips") is True
    views = page.rank
    assert "toy MAE" in views.caption.object and "encoder's output" in views.caption.object
    assert int(views.snapshot["layer"]) == SMALL["depth"] and str(views.snapshot["structure"]) == "unet"
    assert views.snapshot["final_features"].shape == (2, 359, 8)  # the held-out digits' bottleneck
    assert views.snapshot["probe_few"].shape == (2,)
    page.structure = "no_skips"  # Table 3a's ablation
    previewed(page)
    assert page.config().model.get("unet_skips") is False and "Table 3a" in views.caption.object
    page.structure = "no_decoder"
    previewed(page)
    assert not page.config().model.get("decoder_depth") and "No encoder-decoder split" in views.caption.object
    page.structure = "unet"
    previewed(page)
    assert views.accuracy.title.text == "Loss per member"
    page.param.trigger("play")
    assert poll_until(page, lambda: page.job.status()["state"] == "completed")
    page.poll()
    snapshot = views.snapshot
    assert np.isnan(snapshot["test_acc"]).all() and (snapshot["test_loss"] < 0.9).all(), snapshot["test_loss"]
    np.testing.assert_allclose(views.accuracy_src.data["value"][1::2], snapshot["test_loss"], rtol=1e-6)
    assert views.failed() == []
    snapshot = {**snapshot, "test_loss": np.array([0.3, 0.97], np.float32)}  # as if α_min 0.5 had stayed at zeros' loss
    views.show(snapshot)
    assert views.failed() == ["α_min 0.5 (01-alpha_min-0.5) is at a held-out loss of 0.970 (predicting zeros scores "
                              "about 1)"]
    page.task = "classify"
    previewed(page)
    assert page.config().data.name == "spiral" and views.accuracy.title.text == "Accuracy per member"


def test_the_sweep_trains_in_a_child_process_and_a_killed_one_is_reported(tmp_path):
    """With the manager's jobs in child processes the page draws the same snapshots, pauses and steps across the
    process boundary; a child killed outright shows as failed with its exit code, and a new sweep starts."""

    from lab.jobs.child import ChildJob
    from lab.jobs.manager import JobManager

    manager = JobManager(tmp_path / "runs", max_jobs=1, processes=True)
    try:
        page = RankPage(manager=manager, **SMALL)
        page.param.trigger("play")
        assert isinstance(page.job, ChildJob)
        assert poll_until(page, lambda: len(page.rank.history["step"]) >= 3, timeout=60)
        page.param.trigger("play")  # pause, then one step
        assert poll_until(page, lambda: page.job.status()["state"] == "paused")
        step = page.job.status()["step"]
        page.param.trigger("step")
        assert poll_until(page, lambda: page.job.status()["step"] == step + 1)
        assert poll_until(page, lambda: page.rank.history["step"][-1] == step + 1), "the paused snapshot is drawn"
        kill_child_then_start_again(page, [page.job])
    finally:
        manager.shutdown()


def test_a_checkpoint_is_measured_layer_by_layer_above_the_sweep(manager, tmp_path):
    import timm
    import torch

    page = RankPage(manager=manager, depth=4, width=8, alpha_mins="1.0, 0.5", n=400)
    assert page.layers.layout not in page.views().objects  # no empty figures before a checkpoint is analysed
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, in_chans=1, num_classes=10)
    (tmp_path / "runs").mkdir(exist_ok=True)
    torch.save(vit.state_dict(), tmp_path / "runs" / "vit.pt")
    source = page.checkpoint
    source.network, source.weights, source.inputs = "timm:vit_tiny_patch16_224", "vit.pt", 64
    source.image_size = 16
    assert source.start() and source.wait(300), shown(source.alert)
    assert page.views().objects[0] is page.layers.layout
    assert page.layers.points() == {key: 25 for key in ("eq6_entropy", "effective_rank", "probe_acc", "to_input",
                                                        "cka_to_input")}  # h_0 and 2 × 12 residual steps
    assert shown(page.layers.heading).startswith("Layers of timm:vit_tiny_patch16_224: 24 residual steps")
    rank = source.result.rank
    assert rank["steps"][:2] == ["blocks.0", "blocks.1"] and rank["width"] == [192] * 25
    assert all(0.0 <= a <= 1.0 for a in rank["probe_acc"])
