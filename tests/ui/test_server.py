"""The lab served for real: ``pn.serve`` on port 0, and a real browser driving Debian's Chromium."""

from __future__ import annotations

import contextlib
import shutil
import urllib.request
from pathlib import Path

import pytest

from lab.jobs.manager import JobManager
from lab.ui.serve import serving
from lab.ui.shell import LabShell

pytestmark = pytest.mark.ui
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
APPS = Path(__file__).resolve().parents[2] / "apps" / "main.py"
JS_HAS_TEXT = """(needle) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(needle)) return true; return false; }"""


@contextlib.contextmanager
def browser_page(width: int = 1500, height: int = 1100):
    """A page of Debian's Chromium driven by Playwright, and the list its console and page errors go to."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": width, "height": height})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page, errors
        finally:
            browser.close()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """The real apps/main.py served by pn.serve on a free port of 127.0.0.1, with its own runs folder."""
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))
    import lab.jobs.manager as manager_module

    monkeypatch.setattr(manager_module, "_MANAGER", JobManager(tmp_path / "runs", max_jobs=2))
    with serving({"apps": str(APPS)}) as url:
        yield url
    manager_module._MANAGER.shutdown()



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


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_browser_trains_and_sees_the_decision_boundary(server):
    url = server
    with browser_page() as (page, errors):
        page.goto(f"{url}/apps?page=Data&steps=60&n=1000", timeout=60_000)
        # the session is live once the URL's settings reached the server and came back drawn (n=1000 → 800 train)
        page.wait_for_function(JS_HAS_TEXT, arg="spiral: 800 train", timeout=120_000)
        page.get_by_role("button", name="Train the default model").click()
        # the status line (a Markdown model) and the plot title (canvas text) are read from Bokeh's models
        page.wait_for_function(JS_HAS_TEXT, arg="step 60 / 60", timeout=300_000)
        page.wait_for_function(JS_HAS_TEXT, arg="Decision boundary at step 60", timeout=60_000)
        assert page.evaluate(JS_HAS_TEXT, "completed")
    # the browser may fail to fetch fonts from the closed network; nothing else may error
    assert not [e for e in errors if "ERR_NAME_NOT_RESOLVED" not in e and "Failed to load resource" not in e], errors


JS_GRIDS = """() => { const out = []; for (const doc of Bokeh.documents) for (const m of doc.all_models) {
    if (m.data && m.data.image && m.data.image[0].shape[1] > 100) {
      const a = m.data.image[0]; let s = 0; for (let i = 0; i < a.length; i++) s = (s * 31 + a[i]) % 1000003;
      out.push({id: m.id, width: a.shape[1], hash: s}); } } return out; }"""
JS_TITLE = """() => { let last = null; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.startsWith('step ')) last = m.text; return last; }"""
JS_ALPHA = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.data && m.data.alpha) return Array.from(m.data.alpha); return null; }"""


def _wait(page, predicate: str, arg=None, timeout: float = 60_000):
    """Wait until ``predicate(alpha, title, grids, arg)`` (a JS arrow function body) is true in the page."""
    page.wait_for_function(f"""(arg) => {{ const alpha = ({JS_ALPHA})(), title = ({JS_TITLE})(),
        grids = ({JS_GRIDS})(); return ({predicate})(alpha, title, grids, arg); }}""", arg=arg, timeout=timeout)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_browser_playground_trains_live_and_follows_sliders(server):
    url = server
    with browser_page() as (page, errors):
        # settings come from the URL query
        page.goto(f"{url}/apps?page=Playground&depth=6&width=6&shortcut=linear&alpha_min=0.5", timeout=60_000)
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
        # train: the grid's data changes between two frames
        page.get_by_role("button", name="Start / pause").click()
        _wait(page, "(alpha, title) => title && title !== 'step 0'", timeout=120_000)
        grid = page.evaluate(JS_GRIDS)[-1]
        # the same figure gets new pixels (two consecutive frames can quantise alike, so wait for a change)
        _wait(page, "(alpha, title, grids, g) => grids.some(x => x.id === g.id && x.hash !== g.hash)", grid,
              timeout=120_000)
        page.get_by_role("button", name="Start / pause").click()
    assert not [e for e in errors if "ERR_NAME_NOT_RESOLVED" not in e and "Failed to load resource" not in e], errors
