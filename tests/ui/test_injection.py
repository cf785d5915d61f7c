"""Nothing from a run folder or a URL becomes markup: a served page shows it as text, in a real browser.

A run folder comes from a cluster or another person; its name, status message, config values, metric keys,
checkpoint names and problems carry HTML and script here. The Runs page lists it and opens it (a clicked row, then
``?run=``); no element or script of theirs may appear in the DOM (Panel renders into shadow roots: all are
searched), no dialog may open, and the text must be there to read, literally.
"""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from lab.runs.store import Run
from tests.ui.browser import JS_DEEP_DOM, browser_page, needs_chromium

pytestmark = pytest.mark.ui

NAME = "run<img src=x onerror=alert(101)><b>bold"  # a folder name may hold anything but "/"
MESSAGE = "<script>alert(102)</script> <img src=x onerror=alert(103)> <b>bold</b> $x$ done"
MODEL = "<img src=x onerror=alert(104)>"
NOTE = "<script>alert(105)</script>"
METRIC = "<img src=x onerror=alert(106)>"
CHECKPOINT = "<img src=x onerror=alert(107)>.pt"
FAILURE = "OSError: <img src=x onerror=alert(108)>"
# the elements a payload above would make: <img src=x>, a <b> holding "bold" (Panel's spinner has an empty <b>),
# a script that calls alert
INJECTED = 'img[src="x"], b, script:not([type="application/json"])'


def _hostile_run(root):
    run = Run(root / NAME)  # written as another program would: the store itself makes safe names
    (run.path / "checkpoints").mkdir(parents=True)
    run.write_config({"model": {"name": MODEL, "depth": 2}, "note": NOTE})
    run.write_status("failed", MESSAGE, step=20, total_steps=40)
    run.append_metrics(*[{"kind": "step", "step": s, "loss": 1.0 / s, METRIC: 0.5} for s in (10, 20)])
    (run.path / "checkpoints" / CHECKPOINT).write_bytes(b"not a checkpoint")
    (run.path / "failed-rank1.txt").write_text(f"Traceback (most recent call last):\n{FAILURE}\n")
    run.save_snapshot("nodes", 20, {**_nodes_snapshot(), "step": np.int64(20)})  # replayed in the node grid
    return run


def _nodes_snapshot():
    from lab.config import ExperimentConfig, apply_overrides
    from lab.snapshots.builders import nodes_snapshot
    from lab.train.build import build_model

    return nodes_snapshot(build_model(apply_overrides(ExperimentConfig(), {"model.depth": 2, "model.width": 3})))


def _injected(page) -> list[str]:
    found = page.evaluate(JS_DEEP_DOM, INJECTED)["found"]
    return [el for el in found if el.startswith("<img") or "alert(" in el or "bold" in el]


def _wait_for_text(page, needle: str) -> None:
    """Wait until the page shows ``needle`` as text, or until an injected image is there (then fail at once)."""
    page.wait_for_function(f"""(needle) => {{ const dom = ({JS_DEEP_DOM})('img[src="x"]');
        return dom.text.includes(needle) || dom.found.length > 0; }}""", arg=needle, timeout=60_000)
    assert _injected(page) == [] and needle in page.evaluate(JS_DEEP_DOM, "none")["text"]


@needs_chromium
def test_nothing_from_a_run_folder_is_markup_on_the_runs_page(server, tmp_path):
    _hostile_run(tmp_path / "runs")
    dialogs: list[str] = []
    with browser_page() as (page, seen):
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server}/apps?page=Runs", timeout=60_000)
        cell = page.locator(".tabulator-cell", has_text=NAME)
        cell.wait_for(timeout=60_000)  # the listed name, as text
        for text in (MODEL, f"{METRIC} 0.5", FAILURE):  # model, metrics and problems columns
            assert page.locator(".tabulator-cell", has_text=text).count() == 1, text
        cell.click()
        for text in (MESSAGE, NOTE, CHECKPOINT, f"run {NAME}", "at step 20, from"):  # header, config,
            _wait_for_text(page, text)  # checkpoints, status line, the saved snapshot replayed
        page.wait_for_function("(name) => new URLSearchParams(location.search).get('run') === name", arg=NAME,
                               timeout=10_000)
        assert _injected(page) == [] and dialogs == []
        # the same run opened from the URL, in a fresh page
        page.goto(f"{server}/apps?page=Runs&run={quote(NAME, safe='')}", timeout=60_000)
        _wait_for_text(page, MESSAGE)
        _wait_for_text(page, CHECKPOINT)
        assert _injected(page) == [] and dialogs == []
    assert not seen.errors and not seen.external, seen


@needs_chromium
def test_an_unknown_page_in_the_url_shows_the_pages_and_names_it_as_text(server):
    bad = "<img src=x onerror=alert(109)>"
    dialogs: list[str] = []
    with browser_page() as (page, seen):
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server}/apps?page={quote(bad, safe='')}", timeout=60_000)
        _wait_for_text(page, f"There is no page {bad}; showing Playground.")
        page.wait_for_function("() => new URLSearchParams(location.search).get('page') === 'Playground'",
                               timeout=10_000)
        page.get_by_role("button", name="Runs").click()  # the navigation works on
        page.locator(".tabulator").first.wait_for(timeout=60_000)  # the run table
        page.get_by_text("There is no page").wait_for(state="hidden", timeout=10_000)  # it went with the page
        assert _injected(page) == [] and dialogs == []
    assert not seen.errors and not seen.external, seen


KEY = "<img src=x onerror=alert(201)>"  # a config key of a compared run
FIELD = "<img src=x onerror=alert(202)>"  # a metric key of a compared run
MEMBER = "m<img src=x onerror=alert(203)>"  # a sweep member's folder name


def _compared_runs(root):
    """Two runs whose config and metric keys are script, and a sweep of two trained residual MLPs whose member
    folders are named with script (trained for real: the sweep opens with the rank views of their checkpoints)."""
    from lab.runs.store import RunStore
    from lab.sweeps import create_sweep, plan_sweep, train_sweep

    runs = []
    for i, name in enumerate(("a", "b")):
        run = Run(root / "x" / name)
        (run.path / "checkpoints").mkdir(parents=True)
        run.write_config({"model": {"name": "residual_mlp", "depth": 2 + i}, KEY: f"<b>bold</b>{i}"})
        run.write_status("completed", "done", step=2, total_steps=2)
        run.append_metrics({"kind": "eval", "step": 2, "loss": 0.5 + i, FIELD: 0.25 + i})
        runs.append(run)
    plan = plan_sweep(None, ["model.depth=2", "model.width=4", "data.n=128", "train.epochs=1",
                             "model.alpha_min=1.0,0.5"])
    folder, members = create_sweep(plan, RunStore(root))
    train_sweep(plan, folder, members, progress=False)
    for k, member in enumerate(members):
        member.append_metrics({"kind": "eval", "step": 99, FIELD: 0.5})
        member.path.rename(member.path.with_name(f"{MEMBER}{k}"))
    return runs, folder


@needs_chromium
def test_nothing_from_run_folders_is_markup_in_the_comparison_or_a_sweep(server, tmp_path):
    runs, sweep = _compared_runs(tmp_path / "runs")
    dialogs: list[str] = []
    with browser_page() as (page, seen):
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server}/apps?page=Runs&compare=x/a,x/b", timeout=60_000)
        page.locator(".tabulator-col-title", has_text=KEY).wait_for(timeout=60_000)  # the key, as a column title
        page.locator(".tabulator-col-title", has_text=FIELD).wait_for(timeout=10_000)
        page.get_by_role("gridcell", name="<b>bold</b>1", exact=True).wait_for(timeout=10_000)
        assert _injected(page) == [] and dialogs == []
        # a sweep folder opens as the comparison of its members and their rank views
        page.goto(f"{server}/apps?page=Runs&run={quote(sweep.id, safe='')}", timeout=60_000)
        page.locator(".tabulator-col-title", has_text=FIELD).wait_for(timeout=60_000)
        _wait_for_text(page, "with the rank views of their last checkpoints")
        _wait_for_text(page, f"{MEMBER}0")
        page.mouse.move(700, 700)  # hover over the plots: tooltips are text too
        assert _injected(page) == [] and dialogs == []
    assert not seen.errors and not seen.external, seen


MATH = r"$$\href{javascript:alert(301)}{click}$$ \(\href{javascript:alert(302)}{x}\) \[y\]"
"""TeX that the page's MathJax would turn into a link that runs a script (Panel's Markdown pane does not pass
``disable_math`` on to the browser)."""
# what MathJax would make of it: its rendered formulas, and any link to a script
MATH_MADE = 'mjx-container, a[href^="javascript"], [href^="javascript"]'


@needs_chromium
def test_no_math_is_rendered_from_a_run_folder_or_the_url(server, tmp_path):
    """A run's name, status message and config value, and the ``?page=`` parameter, carry TeX with
    ``\\href{javascript:…}``: each is shown as typed, and MathJax makes no formula and no link of it."""
    run = Run(tmp_path / "runs" / f"math{MATH[:38]}")  # a folder name may hold anything but "/"
    (run.path / "checkpoints").mkdir(parents=True)
    run.write_config({"model": {"name": "residual_mlp", "depth": 2}, "note": MATH})
    run.write_status("failed", f"status {MATH}", step=1, total_steps=2)
    dialogs: list[str] = []
    with browser_page() as (page, seen):
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server}/apps?page={quote(MATH, safe='')}", timeout=60_000)
        _wait_for_text(page, f"There is no page {MATH}; showing Playground.")
        page.goto(f"{server}/apps?page=Runs&run={quote(run.path.name, safe='')}", timeout=60_000)
        for text in (f"status {MATH}", MATH, f"run {run.path.name}"):  # status line, config, header
            _wait_for_text(page, text)
        page.wait_for_timeout(1500)  # time for MathJax, were it to typeset anything
        assert page.evaluate(JS_DEEP_DOM, MATH_MADE)["found"] == [] and dialogs == []
        page.mouse.click(400, 400)  # a click anywhere (a transparent formula over the page would take it)
        assert dialogs == []
    assert not seen.errors and not seen.external, seen
