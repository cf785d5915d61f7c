"""The lab served for real: ``pn.serve`` on port 0, and a real browser driving Debian's Chromium."""

from __future__ import annotations

import html
import re
import time
import urllib.request

import pytest

from lab.jobs.manager import JobManager, get_manager
from lab.ui.follower import JobFollower
from lab.ui.serve import serving
from lab.ui.shell import LabShell
from tests.ui.browser import (
    JS_GRID_PIXELS,
    JS_HAS_TEXT,
    JS_PIXELS,
    JS_PLOTS,
    browser_page,
    needs_chromium,
    pixel_problems,
    pixel_report,
    plots_off_their_data,
)
from tests.waiting import scaled, wait_until

pytestmark = pytest.mark.ui


def test_serve_answers_on_apps(server):
    url = server
    with urllib.request.urlopen(f"{url}/apps", timeout=60) as response:
        body = response.read().decode()
    assert response.status == 200 and "Residual Lab" in body


def test_shell_served_by_object_on_port_zero(tmp_path):
    manager = JobManager(tmp_path, max_jobs=1)
    with serving({"lab": lambda: LabShell(manager=manager).template()}) as url, \
            urllib.request.urlopen(f"{url}/lab", timeout=60) as response:
        assert response.status == 200 and "Residual Lab" in response.read().decode()


@needs_chromium
def test_browser_trains_and_sees_the_decision_boundary(server):
    """The Data page trains its default model; the status line, the boundary and every curve follow it, each plot
    showing its data (read from its ranges and measured on its pixels)."""
    url = server
    with browser_page(1600, 1200) as (page, seen):  # a common laptop screen: every view fits beside the sidebar
        page.goto(f"{url}/apps?page=Data&steps=60&n=1000", timeout=60_000)
        # the session is live once the URL's settings reached the server and came back drawn (n=1000 → 800 train)
        page.wait_for_function(JS_HAS_TEXT, arg="spiral: 800 train", timeout=120_000)
        page.get_by_role("button", name="Train the default model").click()
        # the status line (a Markdown model) and the plot title (canvas text) are read from Bokeh's models
        _wait_for_text(page, "step 60 / 60", timeout=300_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Decision boundary at step 60", timeout=60_000)
        assert page.evaluate(JS_HAS_TEXT, "completed")
        _wait_for_curves(page, {"loss:loss": 6, "accuracy:test_acc": 1}, timeout=60_000)  # logged every 10 steps
        plots = _plots(page)
        assert {"Loss", "Accuracy"} <= {p["title"] for p in plots}
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
        _pixels(page, "Data")
    assert not seen.errors and not seen.external, seen


JS_GRIDS = """() => { const out = []; for (const doc of Bokeh.documents) for (const m of doc.all_models) {
    if (m.pixels !== undefined && m.pixels.shape && !m.title.startsWith('Decision')) {  // node grids
      const a = m.pixels; let s = 0; for (let i = 0; i < a.length; i++) s = (s * 31 + a[i]) % 1000003;
      out.push({id: m.id, width: a.shape[1], hash: s}); } } return out; }"""
JS_TITLE = """() => { let last = null; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step ')) last = m.title; return last; }"""
JS_ALPHA = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.data && m.data.alpha) return Array.from(m.data.alpha); return null; }"""


def _wait(page, predicate: str, arg=None, timeout: float = 60_000):
    """Wait until ``predicate(alpha, title, grids, arg)`` (a JS arrow function body) is true in the page."""
    page.wait_for_function(f"""(arg) => {{ const alpha = ({JS_ALPHA})(), title = ({JS_TITLE})(),
        grids = ({JS_GRIDS})(); return ({predicate})(alpha, title, grids, arg); }}""", arg=arg, timeout=timeout)


@needs_chromium
def test_browser_playground_follows_sliders_trains_live_and_every_plot_shows_its_data(server):
    url = server
    with browser_page(1600, 1200) as (page, seen):  # a common laptop screen: every view fits beside the sidebar
        # settings come from the URL query
        page.goto(f"{url}/apps?page=Playground&depth=6&width=6&shortcut=linear&alpha_min=0.5&snapshot_every=5",
                  timeout=60_000)
        _wait(page, "(alpha, title, grids) => alpha && grids.length > 0")
        assert page.evaluate(JS_ALPHA) == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
        before = page.evaluate(JS_GRIDS)[-1]
        # move the depth slider one step left with the keyboard: the α chart and the grid's shape follow
        handles = page.locator(".noUi-handle").filter(visible=True)
        handles.nth(0).focus()  # the Model section's first slider: depth
        page.keyboard.press("ArrowLeft")
        _wait(page, "(alpha) => alpha && alpha.length === 5")
        assert page.evaluate(JS_ALPHA) == pytest.approx([1.0, 0.875, 0.75, 0.625, 0.5])
        _wait(page, "(alpha, title, grids, width) => grids.some(g => g.width < width)", before["width"])
        # the alpha_min slider: the last α follows
        handles.nth(2).focus()
        page.keyboard.press("ArrowRight")
        _wait(page, "(alpha) => alpha && Math.abs(alpha[4] - 0.55) < 1e-6")
        page.get_by_text("Layer similarity").click()  # open the similarity view: its heatmaps are computed
        # train: the grid's data changes between two frames
        page.get_by_role("button", name="Start / pause").click()
        _wait(page, "(alpha, title) => title && title !== 'step 0'", timeout=120_000)
        grid = page.evaluate(JS_GRIDS)[-1]
        # the same figure gets new pixels (two consecutive frames can quantise alike, so wait for a change)
        _wait(page, "(alpha, title, grids, g) => grids.some(x => x.id === g.id && x.hash !== g.hash)", grid,
              timeout=120_000)
        # every plot shows its data: ranges that miss it draw an empty plot without any error, so each plot's
        # ranges and data are read (the other pages' tests read theirs), then its pixels
        # 100 steps logged, an evaluation every 50
        _wait_for_curves(page, {"loss:loss": 20, "accuracy:test_acc": 1}, timeout=180_000)
        plots = _plots(page)
        titles = {p["title"] for p in plots}
        assert {"Loss", "Accuracy", "α per block", "Euclidean distance", "linear CKA"} <= titles, titles
        loss = next(p for p in plots if p["title"] == "Loss")
        assert loss["x"]["hi"] >= 95  # the curve reaches the steps trained so far
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
        page.get_by_role("button", name="Start / pause").click()
        _pixels(page, "Playground")
        # the node grid's and the decision map's canvases: drawn, one screen pixel per pixel, hover names a tile
        page.locator(".lab-grid-overlay").first.scroll_into_view_if_needed()
        drawn, decision = sorted(page.evaluate(JS_GRID_PIXELS), key=lambda g: not g["title"].startswith("step "))
        assert drawn["title"].startswith("step ") and drawn["size"] == drawn["shown"], drawn["size"]
        assert drawn["coloured"] > 0.3, drawn["coloured"]  # tiles and weight lines, gaps transparent
        assert decision["title"].startswith("Decision boundary at step ") and decision["size"] == [300, 300]
        assert decision["shown"] == [300, 300] and decision["coloured"] > 0.5, decision  # white only near p = 0.5
        x, y = drawn["centres"][2]  # layer 0 (the stem), node 0: the first box after the input's x and y
        page.mouse.move(x, y)
        page.wait_for_function(f"() => ({JS_GRID_PIXELS})().some(g => g.tip.startsWith('layer 0\\nnode 0\\nmin '))")
    assert not seen.errors and not seen.external, seen


@needs_chromium
def test_browser_paces_the_playground_and_a_page_out_of_sight_asks_for_no_snapshot(server):
    """The browser answers each frame it paints (the FrameClock's count comes back), the job makes the next only
    then; with another page shown the Playground's grid is out of sight: the run trains on and makes no snapshot,
    until the Playground is back."""
    url = server
    with browser_page() as (page, seen):
        page.goto(f"{url}/apps?page=Playground&depth=4&width=4&snapshot_every=1", timeout=60_000)
        _wait(page, "(alpha, title, grids) => grids.length > 0")
        page.get_by_role("button", name="Start / pause").click()
        _wait(page, "(alpha, title) => title && title !== 'step 0'", timeout=120_000)
        (job,) = get_manager().active()
        page.wait_for_function(f"() => ({JS_CLOCK})().drawn >= 3", timeout=60_000)  # paced by what it draws
        page.get_by_role("button", name="Runs").click()  # the Playground leaves the screen; its run trains on
        # a snapshot asked for before the switch may still land (on a loaded machine, steps later): the snapshots must
        # stop, while training goes on, within a few spans of 50 steps and three of the page's polls
        span = 3 * JobFollower.period / 1000
        settled = False
        for _ in range(5):
            version, step, t0 = job.latest("nodes")[0], _logged_step(job), time.monotonic()
            assert wait_until(lambda s=step, t=t0: _logged_step(job) >= s + 50 and time.monotonic() - t >= span, 60)
            if job.latest("nodes")[0] == version:
                settled = True  # trained on, no snapshot made: nobody sees the grid
                break
        assert settled, f"snapshots went on while the grid was out of sight (version {job.latest('nodes')[0]})"
        # the switch held: the address bar's page name, sent back by the browser, did not take the Playground back
        assert page.get_by_role("button", name="Start / pause").filter(visible=True).count() == 0
        page.get_by_role("button", name="Playground").click()
        assert wait_until(lambda: job.latest("nodes")[0] > version + 2, 60)  # back on screen: snapshots again
        page.get_by_role("button", name="Start / pause").click()
    assert not seen.errors and not seen.external, seen


JS_CLOCK = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.data && m.data.drawn !== undefined && m.data.sent !== undefined)
      return {drawn: m.data.drawn, sent: m.data.sent}; return null; }"""


def _logged_step(job) -> int:
    return max((r["step"] for r in job.metrics_since(0)[0]), default=0)


# The points a curve's source holds in the browser, by source name (``<figure key>:<field>``). Each source's stream
# is its own message, so a test waits for every curve it then reads, not for one of them.
JS_CURVE_POINTS = """(least) => { const n = {}; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.name in least) n[m.name] = m.get_length(); return Object.keys(least).every(k => n[k] >= least[k]); }"""


def _wait_for_curves(page, least: dict[str, int], timeout: float) -> None:
    """Wait until each named curve source holds at least its number of points in the browser."""
    page.wait_for_function(JS_CURVE_POINTS, arg=least, timeout=timeout)


JS_TEXTS = """() => { const out = []; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.trim()) out.push(m.text.slice(0, 200)); return out; }"""


def _wait_for_text(page, needle: str, timeout: float) -> None:
    """Wait for ``needle`` in the page; on timeout say what the page and the server's jobs showed instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(JS_HAS_TEXT, arg=needle, timeout=timeout)
    except PlaywrightTimeout:
        jobs = [(job.run.id, job.owner, job.status()) for job in get_manager().active()]
        texts = [t for t in page.evaluate(JS_TEXTS) if "step" in t or "run" in t.lower()]
        raise AssertionError(f"{needle!r} never shown; status texts: {texts}; active jobs: {jobs}") from None


def _plots(page) -> list[dict]:
    return page.evaluate(JS_PLOTS)


def _wait_drawn(page, titles: list[str], timeout: float = 60) -> None:
    """Wait until a plot whose title starts with each of ``titles`` is laid out in the browser, as :func:`_pixels`
    measures plots: a figure's model reaches the page before its view is built and laid out, which on a busy machine
    takes seconds more (``timeout``: seconds on an idle machine, :func:`tests.waiting.scaled`)."""
    page.wait_for_function(f"(titles) => {{ const shown = ({JS_PIXELS})(null).map(p => p.title); "
                           "return titles.every(t => shown.some(s => s.startsWith(t))); }", arg=titles,
                           polling=250, timeout=1000 * scaled(timeout))


def _pixels(page, name: str) -> list[dict]:
    """Every plot on screen measured on its pixels (:data:`~tests.ui.browser.JS_PIXELS`), asserted readable: frames
    at least 200 px wide, images colouring a fifth of their frame, lines drawn, titles and legends not cut."""
    plots = page.evaluate(JS_PIXELS)
    print(f"\n{name}:\n{pixel_report(plots)}")
    assert plots and not pixel_problems(plots), pixel_problems(plots)
    return plots


def test_the_alignment_pages_first_document_holds_its_sidebar_and_no_figure(server):
    """Served, the Alignment page paints in parts. The document a session first sends (pulled here by a plain client,
    which never reports a drawn page) holds the sidebar — buttons, settings as the URL set them, the preview's status
    — and the views' placeholder, and no figure: the figures, the curves and the checkpoint form are made once a
    browser has drawn that (the next test waits for them in one)."""
    from bokeh.client import pull_session
    from bokeh.models import Button, Plot, Slider

    with pull_session(url=f"{server}/apps", arguments={"page": "Alignment", "depth": "3"}) as session:
        models = list(session.document.models)
    labels = {m.label for m in models if isinstance(m, Button)}
    assert {"Start / pause", "One step", "Reset"} <= labels and "Analyse" not in labels, labels
    assert [m.value for m in models if isinstance(m, Slider) and m.title == "Depth"] == [3]
    texts = " ".join(m.text for m in models if isinstance(getattr(m, "text", None), str))
    assert "The untrained networks are drawn once" in texts and "The views are laid out once" in texts, texts
    assert not [m for m in models if isinstance(m, Plot)], "no figure before the page is drawn"


@needs_chromium
def test_browser_alignment_page_trains_both_networks_and_every_view_shows_data(server):
    """The figures join the page once the browser has drawn its sidebar (the first document holds none: the test
    above), then the untrained networks' preview; both networks train in lockstep and every view follows."""
    url = server
    titles = ("RA1 trajectories", "RA2 |U_jᵀ J_i V_j|", "U_1ᵀ J_2 V_1", "RA3 top singular values", "RA4 1/σ₁",
              "Neural collapse by layer")
    with browser_page(1600, 1200) as (page, seen):
        page.goto(f"{url}/apps?page=Alignment&depth=3&width=32&inputs=16&k=12&every=5&pair_i=2&pair_j=1",
                  timeout=60_000)
        # both columns drawn (the first "Step 0." is one column's; the other's views can still be on their way)
        page.wait_for_function(f"(titles) => titles.every(t => ({JS_PLOTS})().filter(p => p.title.startsWith(t))"
                               ".length === 2)", arg=list(titles), timeout=120_000)
        plots = _plots(page)
        for title in titles:  # each view twice: with skips and without
            assert sum(p["title"].startswith(title) for p in plots) == 2, (title, [p["title"] for p in plots])
        assert page.get_by_text("The views are laid out once").count() == 0, "the placeholder gave way to them"
        assert page.get_by_text("Analyse a checkpoint").is_visible(), "and the checkpoint form joined the sidebar"
        untrained = [p for p in plots if p["title"] not in ("Loss", "Accuracy")]  # no curves before training
        assert not plots_off_their_data(untrained), plots_off_their_data(untrained)
        sigma_before = page.evaluate(JS_SPECTRA)
        page.get_by_role("button", name="Start / pause").click()
        page.wait_for_function(JS_STEP_AT_LEAST, arg=10, timeout=240_000)  # two snapshots past the first
        page.wait_for_function(f"(old) => JSON.stringify(({JS_SPECTRA})()) !== JSON.stringify(old)",
                               arg=sigma_before, timeout=60_000)
        # the accuracy curves start at the first evaluation, the end of the first epoch: snapshots (every 5 steps) and
        # their own progress can be ahead of it
        page.wait_for_function(JS_BOTH_EVALUATED, timeout=60_000)
        plots = _plots(page)
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
        page.get_by_role("button", name="Start / pause").click()
        pixels = _pixels(page, "Alignment")
        assert len(pixels) == 2 * (6 + 2), "six views and two curves per network, none hidden or squeezed"
        mosaics = [p for p in pixels if p["title"].startswith("RA2")]
        # matrix orientation: tile (0, 0) is block 0 in its own basis, diag(σ)/σ₁, whose row 0, column 0 is 1:
        # the mosaic's top-left pixel is the top of Viridis (yellow); flipped rows would put a dark corner there
        assert all(p["corner"][0] > 200 and p["corner"][1] > 200 and p["corner"][2] < 100 for p in mosaics), mosaics
    assert not seen.errors and not seen.external, seen


@needs_chromium
def test_browser_rank_page_sweeps_and_every_view_shows_data(server):
    """A generative sweep (masked-pixel reconstruction of the digits): the classify sweep differs only in its bars'
    numbers, which the page tests check."""
    url = server
    titles = ("Rank by layer", "α per block", "Final-layer rank over training", "Probe accuracy over training",
              "Probe accuracy against α_min", "Rank vs probe accuracy", "Loss per member")
    with browser_page(1600, 1200) as (page, seen):
        page.goto(f"{url}/apps?page=Rank&task=masked&depth=6&width=8&epochs=200&every_s=0.3", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Step 0.", timeout=120_000)
        page.get_by_role("button", name="Start / pause").click()
        page.wait_for_function(JS_RANK_FRAMES, arg=3, timeout=180_000)  # three snapshots over training
        page.wait_for_function(JS_MEMBER_EVALUATED, timeout=120_000)  # and the members' losses
        plots = _plots(page)
        for title in titles:
            assert any(p["title"].startswith(title) for p in plots), (title, [p["title"] for p in plots])
        assert sum(p["title"].startswith("α_min") for p in plots) == 6, "one embedding per member"
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
        page.get_by_role("button", name="Start / pause").click()
        pixels = _pixels(page, "Rank")
        assert len(pixels) == 7 + 6
        assert all(len(p["legends"]) == 1 for p in pixels if not p["title"].startswith("α_min")), \
            "colour (α_min, or train and test) is named in a legend"
    assert not seen.errors and not seen.external, seen


@needs_chromium
def test_browser_diffusion_page_trains_u_vits_in_lockstep_and_every_view_shows_data(server):
    """Two U-ViTs (α_min 1 and 0.6) train one epoch in lockstep; their evaluation reaches the page: the curves, the
    α schedules, each one's samples and probe grid, all drawn on their pixels."""
    url = server
    with browser_page(1600, 1400) as (page, seen):
        page.goto(f"{url}/apps?page=Diffusion&alpha_mins=1.0%2C0.6&steps=12&every_epochs=1&fd_samples=20"
                  "&sample_steps=2&probe_samples=100", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Start to train one U-ViT per α_min", timeout=120_000)
        # the URL's two members replace the four default ones: three curves, the α schedules, and per member its
        # samples and probe grid (drawn once it evaluates)
        page.wait_for_function(f"() => ({JS_PLOTS})().length === 4 + 2 * 2", timeout=60_000)
        schedules = next(p for p in _plots(page) if p["title"] == "α per residual sub-layer")
        assert schedules["points"] == 2 and schedules["y"]["lo"] == pytest.approx(0.6)  # before any training
        page.get_by_role("button", name="Start / pause").click()
        page.wait_for_function(JS_TEXT_COUNT, arg=["probes of step 12", 2], timeout=240_000)
        page.wait_for_function(JS_TEXT_COUNT, arg=["completed", 2], timeout=60_000)
        plots = _plots(page)
        titles = [p["title"] for p in plots]
        for title in ("Held-out ε-loss", "Digits-FD", "Best probe accuracy", "α per residual sub-layer",
                      "Samples, α_min = 1, step 12", "Samples, α_min = 0.6, step 12", "Probe, α_min = 1: best",
                      "Probe, α_min = 0.6: best"):
            assert any(t.startswith(title) for t in titles), (title, titles)
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
        pixels = _pixels(page, "Diffusion")
        samples = [p for p in pixels if p["title"].startswith("Samples")]
        assert len(samples) == 2 and all(p["coloured"] > 0.3 for p in samples), samples  # a grid of digits
        shared = [p for p in pixels if not p["title"].startswith(("Samples", "Probe"))]
        assert len(shared) == 4 and all(len(p["legends"]) == 1 for p in shared), "colour (α_min) has a legend"
        assert page.evaluate(JS_HAS_TEXT, "α_min 0.6, step 12: held-out ε-loss")
    assert not seen.errors and not seen.external, seen


# at least n of the page's texts (Markdown panes, status lines) hold the needle
JS_TEXT_COUNT = """([needle, n]) => { let k = 0; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(needle)) k++; return k >= n; }"""


# the bars show a member's evaluated accuracy (or loss)
JS_MEMBER_EVALUATED = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.name === "accuracy_per_member" && Array.from(m.data.value).some(v => v > 0)) return true; return false; }"""
# snapshots drawn on the final-layer-rank-over-training curves
JS_RANK_FRAMES = """(n) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.name === "rank_over_training" && m.data.xs.length && m.data.xs[0].length >= n) return true;
    return false; }"""


JS_SPECTRA = """() => { const out = []; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.data && m.data.ys && m.data.block) out.push(Array.from(m.data.ys[0])); return out; }"""
# both networks' accuracy curves hold a point
JS_BOTH_EVALUATED = """() => { let curves = 0, drawn = 0;
    for (const doc of Bokeh.documents) for (const m of doc.all_models)
      if (m.name === 'accuracy:test_acc') { curves++; if (m.get_length() > 0) drawn++; }
    return curves === 2 && drawn === 2; }"""
# both columns' summaries read "Step N." with N >= arg
JS_STEP_AT_LEAST = """(n) => { let ok = 0; for (const doc of Bokeh.documents) for (const m of doc.all_models) {
    const s = typeof m.text === 'string' && m.text.match(/Step (\\d+)\\./);
    if (s && Number(s[1]) >= n) ok++; } return ok >= 2; }"""


@needs_chromium
def test_out_of_range_url_settings_are_named_and_clamped(server):
    url = server
    with browser_page() as (page, seen):
        page.goto(f"{url}/apps?page=Playground&depth=99999&alpha_min=5", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="depth=99999", timeout=120_000)
        text = page.evaluate("""() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
            if (typeof m.text === 'string' && m.text.includes('depth=99999')) return m.text; return ''; }""")
        assert "depth must be in [1, 64]; using 64" in text and "alpha_min must be in [0.0, 1.0]; using 1.0" in text
        page.wait_for_function(JS_HAS_TEXT, arg="step 0", timeout=60_000)
        # the URL then carries the value in use (the query is its own message, sent after the clamped values')
        page.wait_for_function("() => location.search.includes('depth=64')", timeout=30_000)
    assert not seen.errors and not seen.external, seen


@needs_chromium
def test_a_hostile_alignment_link_is_clamped_and_said_and_the_page_answers(server):
    """A link asking for sizes that would take minutes (the preview of two 32-block networks 1024 wide on 512 inputs)
    and a 40 kB data folder: the sizes are lowered to what a link may ask, the folder refused before any path work,
    each said as text, and the preview of the lowered sizes is drawn."""
    url = server
    folder = "a/" * 20_000
    with browser_page(1600, 1200) as (page, seen):
        page.goto(f"{url}/apps?page=Alignment&width=1024&depth=32&inputs=512&k=64&data_folder={folder}",
                  timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="a link may ask at most", timeout=120_000)
        text = page.evaluate("""() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
            if (typeof m.text === 'string' && m.text.includes('a link may ask')) return m.text; return ''; }""")

        def shown_text(html_text: str) -> str:  # the notice's HTML as read: entities decoded, tags dropped
            return re.sub(r"<[^>]+>", "", html.unescape(html.unescape(html_text)))

        for name, limit in (("width=1024", 128), ("depth=32", 16), ("inputs=512", 64), ("k=64", 30)):
            assert f"{name}: a link may ask at most {limit}, which is used" in shown_text(text), (name, text)
        page.wait_for_function(JS_HAS_TEXT, arg="at most 1,000 characters", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Preview of the untrained networks: done", timeout=240_000)
        # the figures' data follow the status line in their own messages
        page.wait_for_function(f"() => ({JS_PLOTS})().filter(p => p.title.startsWith('RA3') && p.points > 0).length "
                               "== 2", timeout=60_000)
        page.wait_for_function("() => location.search.includes('width=128')", timeout=30_000)
        plots = [p for p in _plots(page) if p["title"].startswith("RA3")]
        assert len(plots) == 2 and not plots_off_their_data(plots), plots
    assert not seen.errors and not seen.external, seen


# points of the curve whose source is named ``name`` (LiveCurves: "loss:loss", the Runs page: "Learning rate:lr")
JS_SOURCE_POINTS = """(name) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.name === name && m.get_length) return m.get_length(); return 0; }"""


@needs_chromium
def test_browser_runs_page_lists_runs_and_follows_the_opened_one(server, tmp_path):
    """Run folders written beside the server (as a cluster job on a mounted disk would) are listed; a clicked row
    opens its run, whose curves grow as its metrics file does; runs are compared; a run's saved snapshots and a sweep's
    rank views are drawn."""
    import numpy as np

    from lab.config import to_dict
    from lab.runs.store import RunStore
    from lab.snapshots.builders import nodes_snapshot
    from lab.sweeps import create_sweep, plan_sweep, train_sweep
    from lab.train.build import build_data, build_model
    from tests.jobs.helpers import tiny

    store = RunStore(tmp_path / "runs")
    runs = {}
    for name, state in (("older", "completed"), ("live", "running")):
        run = runs[name] = store.create(name)
        run.write_config({"model": {"name": f"model-{name}"}})
        run.write_status(state, f"{state} {name}", step=60, total_steps=200)
        run.append_metrics(*[{"kind": "step", "step": s, "loss": 2.0 / s, "lr": 0.01} for s in range(10, 61, 10)],
                           {"kind": "eval", "step": 60, "train_acc": 0.7, "test_acc": 0.65, "probe_top1": 0.4})
    live = runs["live"]
    saved = store.create("saved")  # a Playground run's node maps, as its job writes them
    cfg = tiny()
    saved.write_config(to_dict(cfg))
    data = build_data(cfg)
    for step in (0, 20):
        saved.save_snapshot("nodes", step, {**nodes_snapshot(build_model(cfg, data)), "step": np.int64(step)})
    plan = plan_sweep(None, ["model.depth=4", "model.width=8", "data.n=512", "train.epochs=1",
                             "model.alpha_min=1.0,0.5"])
    folder, members = create_sweep(plan, store)
    train_sweep(plan, folder, members, progress=False)
    url = server
    with browser_page(1600, 1200) as (page, seen):
        page.goto(f"{url}/apps?page=Runs", timeout=60_000)
        cell = page.locator(".tabulator-cell", has_text=live.id)
        cell.wait_for(timeout=60_000)
        assert page.locator(".tabulator-cell", has_text=runs["older"].id).count() == 1
        assert page.locator(".tabulator-cell", has_text="60 / 200 (30%)").count() == 2
        cell.click()
        page.wait_for_function(JS_SOURCE_POINTS, arg="loss:loss", timeout=60_000)
        page.wait_for_function("(id) => location.search.includes('run=' + id)", arg=live.id, timeout=10_000)
        assert page.evaluate(JS_SOURCE_POINTS, "loss:loss") == 6
        live.append_metrics(*[{"kind": "step", "step": s, "loss": 2.0 / s, "lr": 0.005} for s in (70, 80, 90)])
        page.wait_for_function(f"() => ({JS_SOURCE_POINTS})('loss:loss') === 9", timeout=30_000)
        page.wait_for_function(JS_HAS_TEXT, arg="model-live", timeout=10_000)  # the header of the opened run
        plots = _plots(page)
        assert [p["title"] for p in plots] == ["Loss", "Accuracy", "Learning rate", "Linear probe accuracy"], plots
        assert next(p for p in plots if p["title"] == "Loss")["x"]["hi"] == 90
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
        _wait_drawn(page, [p["title"] for p in plots])
        assert len(_pixels(page, "Runs")) == 4
        # the two runs compared (from the URL, as a shared link would): their curves overlaid, labelled by model
        page.goto(f"{url}/apps?page=Runs&compare={runs['older'].id}%2C{live.id}", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Comparing 2 runs", timeout=60_000)
        page.wait_for_function("() => { for (const doc of Bokeh.documents) for (const m of doc.all_models) "
                               "if (m.name === 'compare:loss' && m.data.xs.length === 2) return true; return false; }",
                               timeout=30_000)
        _wait_drawn(page, ["loss", "test_acc", "lr"])
        compared = [p for p in _pixels(page, "Runs compared") if p["title"] in ("loss", "test_acc", "lr")]
        assert len(compared) == 3 and all(len(p["legends"]) == 1 for p in compared), compared
        assert page.locator(".tabulator-cell", has_text="model-older").count() >= 1  # the table of differences
        # a run's saved node maps, replayed read-only in the Playground's views
        page.goto(f"{url}/apps?page=Runs&run={saved.id}", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="at step 20, from", timeout=60_000)
        _wait_drawn(page, ["step 20", "Decision boundary at step 20"])
        replayed = [p for p in _pixels(page, "Saved snapshots") if p["title"].startswith(("step", "Decision"))]
        assert sorted(p["title"] for p in replayed) == ["Decision boundary at step 20", "step 20"], replayed
        # a sweep: the Rank page's views of its members' last checkpoints, beside their comparison
        page.goto(f"{url}/apps?page=Runs&run={folder.id}", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="with the rank views of their last checkpoints", timeout=60_000)
        _wait_drawn(page, ["Rank by layer", "α_min 1 ", "α_min 0.5 "])
        ranks = [p for p in _pixels(page, "Sweep rank views") if p["title"].startswith(("Rank by layer", "α_min"))]
        assert len(ranks) == 1 + 2, ranks
    assert not seen.errors and not seen.external, seen


@needs_chromium
def test_browser_alignment_page_analyses_a_checkpoint_from_the_servers_folder_and_refuses_one_outside(server,
                                                                                                     tmp_path):
    import torch
    import torchvision

    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)  # digits are grey
    (tmp_path / "runs").mkdir(exist_ok=True)
    torch.save(net.state_dict(), tmp_path / "runs" / "resnet18.pt")
    torch.save(net.state_dict(), tmp_path / "elsewhere.pt")
    url = server
    with browser_page(1600, 1200) as (page, seen):
        page.goto(f"{url}/apps?page=Alignment&depth=3&width=32&inputs=16&k=12", timeout=60_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Step 0.", timeout=120_000)
        page.get_by_text("Analyse a checkpoint").click()
        for placeholder, value in (("timm:resnet18", "torchvision:resnet18"),
                                   ("resnet18.safetensors", str(tmp_path / "elsewhere.pt"))):
            page.get_by_placeholder(placeholder).fill(value)
            page.get_by_placeholder(placeholder).press("Enter")
        page.get_by_role("button", name="Analyse", exact=True).click()
        _wait_for_text(page, "is outside the folders this server reads", 30_000)
        page.get_by_placeholder("resnet18.safetensors").fill("resnet18.pt")
        page.get_by_placeholder("resnet18.safetensors").press("Enter")
        page.get_by_role("button", name="Analyse", exact=True).click()
        _wait_for_text(page, "checkpoint torchvision:resnet18", 300_000)
        plots = [p for p in _plots(page) if p["title"] not in ("Loss", "Accuracy")]
        assert sum(p["title"].startswith("RA2") for p in plots) >= 1
        assert not plots_off_their_data(plots), plots_off_their_data(plots)
    assert not seen.errors and not seen.external, seen
    assert any("imported-torchvision-resnet18" in p.name for p in (tmp_path / "runs").iterdir())
