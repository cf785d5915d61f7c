"""The Alignment page driven through its parameters: every view shows data, before and while training."""

import re

import numpy as np
import panel as pn
import pytest
import yaml

from lab.analysis.residual_alignment import PAPER_K, RA4_FIT_START
from lab.config import ExperimentConfig, from_dict
from lab.jobs.manager import JobManager
from lab.ui.pages.alignment import AlignmentPage
from tests.ui.driving import kill_child_then_start_again, poll_until, shown

SMALL = {"depth": 3, "width": 32, "inputs": 16, "k": 12, "every": 5, "epochs": 1000}


@pytest.fixture
def manager2(tmp_path):
    m = JobManager(tmp_path / "runs", max_jobs=2)
    yield m
    m.shutdown()


def _all_views_have_data(views):
    return all(n > 0 for n in views.points().values())


def previewed(page: AlignmentPage) -> AlignmentPage:
    """``page`` once its untrained preview (computed in a bounded child) has been drawn."""
    assert page.preview.wait(120), shown(page.preview.alert)
    return page


def test_untrained_networks_are_drawn_with_and_without_skips(manager2):
    page = previewed(AlignmentPage(manager=manager2, **SMALL))
    for views in (page.main, page.twin):
        assert _all_views_have_data(views), views.points()
        assert views.snapshot["sigma"].shape == (3, 12) and views.snapshot["grid"].shape == (1, 3, 3, 12, 12)
    assert page.main.heading.object == "### with skips" and page.twin.heading.object == "### without skips"
    words = shown(page.main.summary)  # RA2 and its baseline with their intervals; RA3 n/a, and why (K = 12 < 2C)
    assert re.search(r"RA2 alignment \(i ≠ j\) [0-9.]+ \[[0-9.]+, [0-9.]+\] vs random [0-9.]+ \[", words), words
    assert "RA3 n/a: RA3 compares the top C = 10 singular values with the next 10: it needs K ≥ 20, and K = 12" in words
    cfg = page.config()
    assert cfg.model.name == "fc_resnet" and cfg.model.builder_kwargs()["depth"] == 3
    assert cfg.model.shortcut == "identity" and page.config(twin=True).model.shortcut == "none"
    assert cfg.train.lr_schedule == "cosine" and cfg.data.name == "digits"
    page.skips = False
    assert page.main.heading.object == "### without skips" and page.twin.heading.object == "### with skips"
    page.contrast = False
    assert not any(part.visible for part in page._twin_parts)


def test_served_the_figures_are_made_once_the_browser_has_drawn_the_sidebar(manager2, monkeypatch):
    """Served, the page first holds its sidebar and a placeholder, and computes nothing: settings the URL applies
    before the browser has drawn it start no preview. Once drawn (``pn.state.onload``) its figures, curves and
    checkpoint form are made, with the view settings given before, and the preview of the settings then in use
    starts."""
    loads = []
    monkeypatch.setattr("lab.ui.views.task_panel.session_id", lambda: "a browser session")
    monkeypatch.setattr(pn.state, "onload", loads.append)
    page = AlignmentPage(manager=manager2, **SMALL)
    sidebar = page.controls()
    assert {"Start / pause", "One step", "Reset"} <= {b.name for b in sidebar.select(pn.widgets.Button)}
    assert "Analyse" not in {b.name for b in sidebar.select(pn.widgets.Button)}, "the checkpoint form comes later"
    assert not page.views().select(pn.pane.Bokeh) and not hasattr(page, "main")
    page.param.update(depth=4, pair_i=2, projection="pca")  # the URL's settings, before the page is drawn
    assert page.preview.task is None and not page.poll(), "nothing is computed before the page is drawn"
    assert len(loads) == 1
    loads.pop()()  # the browser has drawn the page
    assert len(page.views().select(pn.pane.Bokeh)) == 2 * 6 + 2 * 2, "six views and two curves per network"
    assert "Analyse" in {b.name for b in sidebar.select(pn.widgets.Button)}, "the form joins the sidebar shown"
    assert (page.main.pair, page.twin.projection) == ((2, 0), "pca")
    previewed(page)
    assert page.main.snapshot["sigma"].shape == (4, 12) and _all_views_have_data(page.twin)
    assert not loads


def test_the_papers_analysis_settings_are_the_defaults(manager2):
    page = previewed(AlignmentPage(manager=manager2, **{**SMALL, "depth": 6, "k": PAPER_K}))
    assert (page.param.k.default, page.param.fit_from.default) == (PAPER_K, RA4_FIT_START + 1) == (30, 5)
    assert page.param.projection.default == "gauss" and page.main.projection == "gauss"
    assert page.main.snapshot["sigma"].shape == (6, 30), "K = 30 fits a width-32 network"
    assert int(page.main.snapshot["fit_start"]) == RA4_FIT_START
    assert page.main.ra4.title.text == "RA4 1/σ₁ by block, fit from block 5"
    assert page.main.trajectories.title.text == "RA1 trajectories, Gaussian plane"
    page.fit_from = 2
    previewed(page)
    assert int(page.main.snapshot["fit_start"]) == 1 and page.main.ra4.title.text.endswith("fit from block 2")
    page.k = 64  # wider than the blocks: capped, and said
    previewed(page)
    assert page.main.snapshot["sigma"].shape == (6, 32) and "using K = 32" in shown(page.notice)


def test_mosaic_rows_are_jacobian_blocks_from_the_top():
    from lab.ui.views.live_alignment import mosaic

    grid = np.zeros((2, 2, 3, 3))
    grid[0, 1, 0, 0] = 1.0  # block 0's Jacobian, in block 1's basis: the tile top right
    grid[1, 0, 2, 2] = -2.0  # block 1's Jacobian, in block 0's basis: the tile bottom left
    image = mosaic(grid)
    assert image.shape == (7, 7) and np.isnan(image[3]).all() and np.isnan(image[:, 3]).all()  # white gaps
    assert image[0, 4] == 1.0 and image[6, 2] == 1.0  # row 0 is the top of the plot (the y range is flipped)


def test_resuming_with_every_slot_taken_says_so(manager2):
    from tests.jobs.helpers import tiny

    page = AlignmentPage(manager=manager2, **SMALL)
    page.param.trigger("step")  # both networks paused after one step
    assert poll_until(page, lambda: [j.status()["step"] for j in page._jobs()] == [1, 1]
                      and all(j.status()["state"] == "paused" for j in page._jobs()))
    others = [manager2.start_thread(tiny()) for _ in range(2)]  # paused jobs hold no slot: both are taken
    page.param.trigger("play")
    page.poll()
    assert page.follower.status.alert.visible and "busy" in shown(page.follower.status.alert)
    assert all(j.status()["state"] == "paused" for j in page._jobs())
    page.param.trigger("step")
    assert "busy" in shown(page.follower.status.alert)
    for other in others:
        other.stop()
    page.param.trigger("reset")


@pytest.fixture(params=[False, True], ids=["threads", "child process"])
def pair_manager(tmp_path, request):
    """One job slot (the pair holds one together), its jobs in threads or in a child process."""
    m = JobManager(tmp_path / "runs", max_jobs=1, processes=request.param)
    yield m
    m.shutdown()


def test_training_in_lockstep_updates_every_view(pair_manager):
    page = previewed(AlignmentPage(manager=pair_manager, **SMALL))
    before = page.main.snapshot["sigma"].copy()
    page.param.trigger("play")
    assert poll_until(page, lambda: int(page.main.snapshot["step"]) >= 10 and int(page.twin.snapshot["step"]) >= 10)
    assert not np.allclose(before, page.main.snapshot["sigma"]), "the spectra moved with training"
    assert _all_views_have_data(page.main) and _all_views_have_data(page.twin)
    assert page.curves.points()["step:loss"] > 0 and page.twin_curves.points()["step:loss"] > 0
    page.param.trigger("play")  # pause both
    assert poll_until(page, lambda: all(j.status()["state"] == "paused" for j in page._jobs()))
    steps = [j.status()["step"] for j in page._jobs()]
    assert abs(steps[0] - steps[1]) <= 1, f"lockstep: {steps}"
    page.param.trigger("step")
    assert poll_until(page, lambda: [j.status()["step"] for j in page._jobs()] == [s + 1 for s in steps]
                       and all(j.status()["state"] == "paused" for j in page._jobs()))
    runs = {page.follower.job.run.path, page.twin_follower.job.run.path}
    page.param.trigger("reset")
    assert page.job is None and page.twin_follower.job is None
    assert all((r / "config.json").is_file() for r in runs), "runs stay on disk"


def test_views_and_exports(manager2):
    page = previewed(AlignmentPage(manager=manager2, **SMALL))
    page.param.update(pair_i=2, pair_j=0, projection="pca")
    assert page.main.pair_figure.title.text.startswith("U_0ᵀ J_2 V_0")
    assert "PCA" in page.main.trajectories.title.text
    assert np.allclose(page.main.paths.data["xs"][0], page.main.snapshot["traj_pca"][:, 0, 0])
    with np.load(page.snapshot_npz()) as arrays:
        assert {"sigma", "grid", "twin_sigma"} <= set(arrays.files)
    assert b"<html" in page.plots_html().getvalue()[:200].lower() and b"cdn.bokeh" not in page.plots_html().getvalue()
    cfg = from_dict(ExperimentConfig, yaml.safe_load(page.config_yaml().getvalue()))
    assert cfg == page.config()


def test_conv_types_and_bad_data_folders(manager2, tmp_path, monkeypatch):
    page = previewed(AlignmentPage(manager=manager2, **{**SMALL, "model_type": "conv_two_stage", "depth": 2,
                                                        "width": 4}))
    assert page.main.snapshot["scores"].shape == (2, 2) and np.isnan(page.main.snapshot["scores"][0, 1])
    assert _all_views_have_data(page.main)
    monkeypatch.setenv("LAB_DATA_DIRS", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    page.param.update(dataset="mnist", data_folder="/etc")
    assert "outside the data folders" in shown(page.follower.status.alert)
    page.data_folder = "."
    page.preview.wait(120)  # the data are read in the preview's child: it says why they cannot be
    assert "not found" in shown(page.follower.status.alert) and "train-images" in shown(page.follower.status.alert)
    page.param.trigger("play")
    assert page.job is None, "nothing starts on settings that cannot load"
    page.param.update(dataset="digits", data_folder="")
    previewed(page)
    assert page.follower.status.alert.visible is False
    page.param.trigger("play")
    assert page.job is not None, "settings that load start again"
    page.param.trigger("reset")


def test_a_pair_trained_in_a_child_process_is_reported_failed_when_the_child_is_killed(tmp_path):
    """Both networks in one child (their snapshots are built there, by a builder that crossed to it); killed, both
    show as failed with its exit code, and the page goes on."""

    from lab.jobs.child import ChildJob

    manager = JobManager(tmp_path / "runs", max_jobs=1, processes=True)
    try:
        page = AlignmentPage(manager=manager, **SMALL)
        page.param.trigger("play")
        jobs = page._jobs()
        assert len(jobs) == 2 and all(isinstance(j, ChildJob) for j in jobs) and jobs[0].proc is jobs[1].proc
        assert poll_until(page, lambda: page.twin.snapshot is not None and int(page.twin.snapshot["step"]) >= 5,
                          timeout=60)
        kill_child_then_start_again(page, jobs)
    finally:
        manager.shutdown()


def test_a_checkpoint_from_the_servers_folders_is_analysed_into_the_left_column_and_others_are_refused(
        manager2, tmp_path, monkeypatch):
    import torch
    import torchvision

    page = previewed(AlignmentPage(manager=manager2, **SMALL))
    source = page.checkpoint
    assert source.roots[0] == (tmp_path / "runs").resolve()
    assert "settings" not in source.param and "model" not in " ".join(source.param)  # data settings only
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)  # digits are grey
    weights = tmp_path / "runs" / "mine" / "resnet18.pt"
    weights.parent.mkdir(parents=True)
    torch.save(net.state_dict(), weights)
    (tmp_path / "outside.pt").write_bytes(weights.read_bytes())
    (tmp_path / "runs" / "link.pt").symlink_to(tmp_path / "outside.pt")
    (tmp_path / "runs" / "linked").symlink_to(tmp_path / "runs" / "mine")
    torch.save(net, tmp_path / "runs" / "pickled.pt")
    source.network, source.image_size, source.inputs, source.k = "torchvision:resnet18", 16, 4, 3
    for typed, words in ((str(tmp_path / "outside.pt"), "outside the folders this server reads"),
                         ("link.pt", "link"), ("linked/resnet18.pt", "link"), ("../outside.pt", ".."),
                         ("mine/none.pt", "no file")):
        source.weights = typed
        assert source.start() and source.wait(60) is False, typed  # checked where the file is opened: in the child
        assert words in shown(source.alert), (typed, shown(source.alert))
    for name in ("weights", "network", "blocks", "data_folder"):  # a megabyte typed (or sent) is refused, briefly
        with pytest.raises(ValueError, match="characters, where at most") as err:
            setattr(source, name, "a/" * 500_000)
        assert len(str(err.value)) < 200
    with pytest.raises(ValueError):
        source.image_size = 512  # the ceiling
    source.weights = "pickled.pt"  # inside, but a pickled model: the analysis refuses it, the page says why
    assert source.start() and source.wait(60) is False
    assert "pickled objects" in shown(source.alert)
    source.weights = "mine/resnet18.pt"
    monkeypatch.setenv("LAB_PAGE_JOBS", "1")
    assert source.start()
    other = AlignmentPage(manager=manager2, **SMALL)  # a second session, while the first analyses: refused
    other.checkpoint.network, other.checkpoint.weights = "torchvision:resnet18", "mine/resnet18.pt"
    assert not other.checkpoint.start() and "at most 1" in shown(other.checkpoint.alert)
    assert "at most 1" in shown(other.preview.alert)  # its preview too, until the server has room
    assert not page.preview.start("again", print, on_result=print), "one analysis per session"
    assert "runs an analysis already" in shown(page.preview.alert)
    assert source.wait(300) and not source.alert.visible
    assert shown(page.main.heading) == "checkpoint torchvision:resnet18"
    assert _all_views_have_data(page.main)
    assert page.main.snapshot["scores"].shape == (8, 8)  # the ResNet-18's eight blocks
    assert not any(part.visible for part in page._twin_parts)
    assert "imported-torchvision-resnet18" in source.result.run.path.name
    page.reset = True  # Reset: the untrained pair again, both columns
    poll_until(page, lambda: all(part.visible for part in page._twin_parts), timeout=30)
    assert all(part.visible for part in page._twin_parts)


def test_the_page_answers_at_once_at_any_size_and_its_preview_is_cancelled_or_bounded(manager2, monkeypatch):
    """Sizes that take minutes (two 32-block networks 1024 wide on 512 inputs) are the preview child's, not the
    page's: the page is built while the preview runs, Cancel ends it, and a time bound ends it and says which."""
    big = {"width": 1024, "depth": 32, "inputs": 512, "k": 64}
    page = AlignmentPage(manager=manager2, **big)
    assert page.preview.busy and page.main.snapshot is None
    page.preview.cancel()
    assert page.preview.wait(60) is False and "cancelled" in shown(page.preview.alert)
    monkeypatch.setenv("LAB_PAGE_SECONDS", "2")
    page.depth = 31  # new settings: a new preview, bounded
    assert page.preview.wait(120) is False
    assert "time bound of 2 s (LAB_PAGE_SECONDS)" in shown(page.preview.alert)
    assert not page.follower.status.alert.visible, "a bound is no reason to refuse to train"


def test_a_hugging_face_language_model_in_the_servers_folders_is_analysed_on_a_text_file(manager2, tmp_path,
                                                                                          monkeypatch):
    """``hf:DIR`` and a text file, typed on the card: the folder's own weights, read by transformers, the text by its
    tokenizer; the page draws its four residual steps. A folder holding a link is refused: its config and tokenizer
    are read by name."""
    pytest.importorskip("transformers")
    from tests.reports.hf_folders import saved_gpt2, text_file

    root, data = tmp_path / "runs", tmp_path / "data"
    root.mkdir(exist_ok=True)
    data.mkdir()
    monkeypatch.setenv("LAB_DATA_DIRS", str(data))
    text = text_file(data)
    folder, _ = saved_gpt2(root, text)
    page = previewed(AlignmentPage(manager=manager2, **SMALL))
    source = page.checkpoint
    source.network, source.dataset, source.data_folder = "hf:linked", "text", "nowhere.txt"
    assert not source.start() and "nowhere.txt" in shown(source.alert)
    source.data_folder = text.name
    (root / "linked").mkdir()
    (root / "linked" / "config.json").symlink_to(folder / "config.json")
    assert source.start() and source.wait(60) is False and "link" in shown(source.alert)
    source.network, source.inputs, source.k = f"hf:{folder.name}", 2, 6
    assert source.start() and source.wait(300), shown(source.alert)
    assert shown(page.main.heading) == f"checkpoint hf:{folder}"
    assert page.main.snapshot["scores"].shape == (4, 4)  # two layers: attention and MLP steps
    assert source.result.summary["positions"] == [15, 31, 47, 63]  # 64 tokens: the longest window it reads
    assert source.result.summary["num_classes"] == 0
