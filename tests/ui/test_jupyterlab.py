"""The lab inside a real JupyterLab, offline.

A notebook runs ``ui.extension()`` and shows the Playground; Chromium runs all cells, presses Start and watches the
status line and the grid follow the job. Nothing may leave the machine (every request to another host is recorded
and aborted) and the browser may report no error. The test prints how long the page took to appear after "Run All
Cells" (and when each cell finished), and how often the status line and the grid changed while the job trained.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import bokeh
import panel as pn
import pytest
from panel.io.resources import CDN_DIST

from lab.ui.notebook import jupyter_base_url, local_url
from tests.ui.browser import JS_PIXELS, browser_page, needs_chromium, pixel_problems, pixel_report
from tests.ui.jupyter import jupyterlab, write_notebook

CELLS = ["import lab.ui as ui\nui.extension()",
         "page = ui.PlaygroundPage(depth=4, width=4, n=400)\npage"]

# the notebook's kernel is connected and idle (the server runs with expose_app_in_browser)
JS_KERNEL_READY = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected'; }"""
JS_PROMPTS = "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'), e => e.textContent)"
# the node grid (the figure drawing an image and the hover quads): its title and a hash of its pixels
JS_GRID = """() => { if (!window.Bokeh) return null;
  for (const doc of Bokeh.documents) for (const m of doc.all_models) {
    if (!m.renderers) continue;
    const glyphs = m.renderers.map(r => r.glyph ? r.glyph.type : '');
    if (!glyphs.includes('Image') || !glyphs.includes('Quad')) continue;
    const a = m.renderers[glyphs.indexOf('Image')].data_source.data.image[0];
    let s = 0; for (let i = 0; i < a.length; i++) s = (s * 31 + a[i]) % 1000003;
    return {id: m.id, hash: s, title: m.title ? m.title.text : ''}; }
  return null; }"""
# the status line: the Markdown pane with CSS class lab-status
JS_STATUS = """() => { if (!window.Bokeh) return null;
  for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.css_classes && m.css_classes.includes('lab-status') && typeof m.text === 'string') return m.text;
  return null; }"""


def _step(status: str | None) -> int:
    found = re.search(r"step (\d+)", status or "")
    return int(found[1]) if found else 0


def test_resource_urls_point_at_the_jupyter_server():
    v, bv = pn.__version__, bokeh.__version__
    assert local_url(f"{CDN_DIST}css/markdown.css") == f"/panel_dist/css/markdown.css?v={v}"
    assert local_url(f"{CDN_DIST}bundled/theme/default.css?v=1") == f"/panel_dist/bundled/theme/default.css?v={v}"
    assert local_url("static/extensions/panel/css/loading.css", "/user/me/") == \
        f"/user/me/panel_dist/css/loading.css?v={v}"
    assert local_url(f"https://cdn.bokeh.org/bokeh/release/bokeh-{bv}.min.js") == \
        f"/panel-preview/static/js/bokeh.min.js?v={bv}"
    assert local_url(f"https://cdn.bokeh.org/bokeh/release/bokeh-gl-{bv}.min.js") == \
        f"/panel-preview/static/js/bokeh-gl.min.js?v={bv}"
    assert local_url("https://example.org/other.js") == "https://example.org/other.js"  # not ours: unchanged


def test_jupyter_base_url(monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    assert jupyter_base_url() == "/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/me")
    assert jupyter_base_url() == "/user/me/"


@pytest.fixture(scope="module")
def jupyterlab_server(tmp_path_factory):
    """One JupyterLab for this module's tests (its start and stop cost seconds each): a free port of 127.0.0.1, a
    private root, state and runs folder; stopped with its kernels afterwards. Yields (base URL, root, runs)."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root, state, runs = base / "root", base / "jupyter", base / "runs"
    root.mkdir()
    state.mkdir()
    with jupyterlab(root, state, env={"LAB_RUNS_DIR": str(runs)}) as url:
        yield url, root, runs


def _api(url: str, method: str = "GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as response:
        body = response.read().decode()
    return json.loads(body) if body else None


@pytest.fixture
def jupyter(jupyterlab_server, request):
    """The module's JupyterLab for one test: yields (the URL of a workspace of this test's own, root folder, runs
    folder, a callable listing the run folders made since the test began). The workspace opens only this test's
    notebook (JupyterLab reopens the documents of the workspace it loads). Afterwards every kernel is shut down: no
    notebook trains on into the next test."""
    url, root, runs = jupyterlab_server
    workspace = f"{url}/lab/workspaces/{re.sub(r'[^A-Za-z0-9]+', '-', request.node.name)}"
    before = set(runs.iterdir()) if runs.exists() else set()

    def new_runs() -> list[Path]:
        return sorted(set(runs.iterdir()) - before) if runs.exists() else []

    yield workspace, root, runs, new_runs
    for kernel in _api(f"{url}/api/kernels"):
        _api(f"{url}/api/kernels/{kernel['id']}", "DELETE")


@pytest.mark.ui
@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_chromium
def test_playground_trains_live_in_jupyterlab_offline(jupyter):
    url, root, _, new_runs = jupyter
    write_notebook(root / "playground.ipynb", CELLS)
    problems: list[str] = []
    with browser_page() as (page, seen):
        page.goto(f"{url}/tree/playground.ipynb", timeout=60_000)
        page.wait_for_function(JS_KERNEL_READY, timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        t0 = time.monotonic()

        # the page appeared: its Start button shows and the grid figure is in a Bokeh document
        start = page.get_by_role("button", name="Start / pause")
        finished: dict[int, float] = {}  # cell index → seconds after Run All when its prompt got a number
        appeared = None
        while appeared is None and time.monotonic() - t0 < 120:
            now = time.monotonic() - t0
            for i, prompt in enumerate(page.evaluate(JS_PROMPTS)):
                if re.search(r"\d", prompt):
                    finished.setdefault(i, now)
            if start.is_visible() and page.evaluate(JS_GRID):
                appeared = now
            else:
                page.wait_for_timeout(100)
        cells = ", ".join(f"cell {i + 1} done at {t:.1f} s" for i, t in sorted(finished.items()))
        assert appeared is not None, f"the page did not appear within 120 s ({cells}); {seen}"
        print(f"\npage appeared {appeared:.1f} s after Run All Cells ({cells})")
        grid = page.evaluate(JS_GRID)

        start.click()
        t1 = time.monotonic()
        statuses: list[tuple[float, str]] = []  # (seconds after Start, text) at each change of the status line
        grids: list[tuple[float, int]] = []  # (seconds after Start, pixel hash) at each change of the grid
        # watched until the status line has moved past its first step and the grid has drawn two new frames since
        # it showed one: a condition on the job's progress, so a loaded machine only makes it take longer
        deadline, first_step = t1 + 240, None
        while time.monotonic() < deadline:
            now, status, g = time.monotonic() - t1, page.evaluate(JS_STATUS), page.evaluate(JS_GRID)
            if not statuses or status != statuses[-1][1]:
                statuses.append((now, status))
            if g and (grids[-1][1] if grids else grid["hash"]) != g["hash"]:
                grids.append((now, g["hash"]))
            if first_step is None and _step(status) > 0:
                first_step = now
            if first_step is not None and sum(t >= first_step for t, _ in grids) >= 2 and \
                    len({_step(s) for _, s in statuses if _step(s) > 0}) >= 2:
                break
            page.wait_for_timeout(50)
        if first_step is None:
            problems.append(f"the status line never showed a step above 0 (last: {statuses[-1][1]!r})")
        else:
            moving = [(t, _step(s)) for t, s in statuses if _step(s) > 0]
            span = moving[-1][0] - moving[0][0]
            steps = (moving[-1][1] - moving[0][1]) / span if span > 0 else 0.0
            frames = [t for t, _ in grids if t >= first_step]
            last = re.sub(r"&lt;.*?&gt;|<.*?>", "", statuses[-1][1] or "").strip()
            print(f"first step shown {first_step:.1f} s after Start; then over {span:.1f} s: {len(moving) - 1} "
                  f"status updates ({(len(moving) - 1) / max(span, 1e-9):.1f}/s), {steps:.0f} steps/s seen, "
                  f"{len(frames)} new grid frames ({len(frames) / max(span, 1e-9):.1f}/s); last: {last!r}")
            if len(frames) < 2:  # not only a first frame: the grid keeps following the job
                problems.append(f"the grid showed {len(frames)} new frames in {now - first_step:.1f} s of training")
            if len(moving) < 2 or moving[-1][1] <= moving[0][1]:
                problems.append(f"the status line stopped at step {moving[-1][1]}")
        if not grids:
            problems.append("the grid's pixels did not change while training")
        start.click()  # pause
        page.wait_for_timeout(500)
    run_files = [p for run in new_runs() for p in run.rglob("*") if p.is_file()]
    if not run_files:
        problems.append("no run folder was written")
    if seen.external:
        problems.append(f"requests left the machine: {seen.external}")
    if seen.errors:
        problems.append(f"the browser reported errors: {seen.errors}")
    assert not problems, "\n".join(problems)


JS_SUMMARY_STEPS = """() => { if (!window.Bokeh) return [];
  const out = []; for (const doc of Bokeh.documents) for (const m of doc.all_models) {
    const s = typeof m.text === 'string' && m.text.match(/Step (\\d+)\\./); if (s) out.push(Number(s[1])); }
  return out; }"""


@pytest.mark.ui
@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_chromium
def test_alignment_page_draws_both_networks_in_jupyterlab_offline(jupyter):
    """The two columns' frames in a notebook cell, drawn in full (training them in lockstep is the served page's
    browser test and the page's own tests: the cell adds nothing to it but minutes)."""
    url, root, _, new_runs = jupyter
    write_notebook(root / "alignment.ipynb", [
        "import lab.ui as ui\nui.extension()",
        "page = ui.AlignmentPage(depth=3, width=32, inputs=16, k=12, every=5)\npage"])
    with browser_page(1600, 1200) as (page, seen):
        page.goto(f"{url}/tree/alignment.ipynb", timeout=60_000)
        page.wait_for_function(JS_KERNEL_READY, timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        # the untrained networks are drawn: both columns' summaries say step 0
        page.wait_for_function(f"() => ({JS_SUMMARY_STEPS})().length === 2", timeout=120_000)
        page.wait_for_timeout(500)
        # in the cell as when served: the mosaics and pairs coloured, every frame at full size, nothing cut (the
        # loss and accuracy curves are there, empty until training)
        plots = page.evaluate(JS_PIXELS)
        print(f"\nAlignment page in a JupyterLab cell:\n{pixel_report(plots)}")
        frames = [p for p in plots if p["title"] not in ("Loss", "Accuracy")]
        assert len(plots) == 2 * (6 + 2) and len(frames) == 2 * 6, pixel_report(plots)
        assert not pixel_problems(frames), pixel_problems(frames)
    assert not new_runs(), "nothing trains until Start"
    assert not seen.external and not seen.errors, seen


JS_LOSS_POINTS = """() => { if (!window.Bokeh) return 0; for (const doc of Bokeh.documents)
  for (const m of doc.all_models) if (m.name === 'loss:loss' && m.get_length) return m.get_length(); return 0; }"""


@pytest.mark.ui
@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_chromium
def test_runs_page_follows_a_run_in_jupyterlab_offline(jupyter):
    from lab.runs.store import RunStore

    url, root, runs, _ = jupyter
    run = RunStore(runs).create("notebook")
    run.write_config({"model": {"name": "model-nb"}})
    run.write_status("running", "written elsewhere", step=30, total_steps=100)
    run.append_metrics(*[{"kind": "step", "step": s, "loss": 1.0 / s} for s in (10, 20, 30)])
    write_notebook(root / "runs.ipynb", [
        "import lab.ui as ui\nui.extension()",
        f"from lab.ui.pages.runs import RunsPage\npage = RunsPage(run={run.id!r})\npage"])
    with browser_page() as (page, seen):
        page.goto(f"{url}/tree/runs.ipynb", timeout=60_000)
        page.wait_for_function(JS_KERNEL_READY, timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        page.locator(".tabulator-cell", has_text=run.id).wait_for(timeout=120_000)  # the table
        page.wait_for_function(f"() => ({JS_LOSS_POINTS})() === 3", timeout=60_000)  # the opened run's curve
        run.append_metrics({"kind": "step", "step": 40, "loss": 0.025})
        page.wait_for_function(f"() => ({JS_LOSS_POINTS})() === 4", timeout=60_000)  # grows with the file
    assert not seen.external and not seen.errors, seen
