"""The lab inside a real JupyterLab, offline.

One notebook shows five pages, one per cell, as a researcher's notebook would: the Alignment page, the Runs page
following a run written elsewhere, the Playground, the Diffusion page and the Rank page on a generative task.
Chromium runs all cells once (one kernel and one browser for the module: each costs many seconds of imports), then
each test reads its own cell. The Alignment page draws both networks in full; the Runs page follows its run's file;
Start on the Playground trains while the status line and the grid follow the job; the Diffusion page draws its
U-ViTs' α schedules and the Rank page its untrained members before any training. Nothing may leave the machine
(every request to another host is recorded and aborted) and the browser may report no error. The tests print when
each cell finished after "Run All Cells", and how often the status line and the grid changed while the job trained.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from types import SimpleNamespace

import bokeh
import panel as pn
import pytest
from panel.io.resources import CDN_DIST

from lab.ui.notebook import jupyter_base_url, local_url
from tests.ui.browser import JS_PIXELS, browser_page, needs_chromium, pixel_problems, pixel_report
from tests.ui.jupyter import JS_KERNEL_READY, jupyterlab, write_notebook
from tests.waiting import deadline, scaled

ALIGNMENT, RUNS, PLAYGROUND, DIFFUSION, RANK = 1, 2, 3, 4, 5  # the notebook's cells (0 loads the extension)

JS_PROMPTS = "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt'), e => e.textContent)"
# The Bokeh documents a notebook cell shows (each output is a document of its own): the JavaScript below reads only
# the cell it is given, so another page's status line or figures cannot answer for it.
DOCS_IN = ("const docsIn = (cell) => cell && window.Bokeh ? [...new Set(Bokeh.index.roots"
           ".filter(v => cell.contains(v.el)).map(v => v.model.document))] : [];")
# the node grid (its canvas component's data model holds the mosaic's pixels; the decision map's canvas is titled
# "Decision boundary …"): its title and a hash of its pixels
JS_GRID = f"""(cell) => {{ {DOCS_IN}
  for (const doc of docsIn(cell)) for (const m of doc.all_models) {{
    if (m.pixels === undefined || !m.pixels.shape || m.title.startsWith('Decision')) continue;
    const a = m.pixels; let s = 0; for (let i = 0; i < a.length; i++) s = (s * 31 + a[i]) % 1000003;
    return {{id: m.id, hash: s, title: m.title}}; }}
  return null; }}"""
# the status line: the Markdown pane with CSS class lab-status
JS_CELL_TEXT = f"""([cell, needle]) => {{ {DOCS_IN}
  for (const doc of docsIn(cell)) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(needle)) return true;
  return false; }}"""
JS_STATUS = f"""(cell) => {{ {DOCS_IN}
  for (const doc of docsIn(cell)) for (const m of doc.all_models)
    if (m.css_classes && m.css_classes.includes('lab-status') && typeof m.text === 'string') return m.text;
  return null; }}"""
# the steps the Alignment page's two summaries name ("Step 0. …")
JS_SUMMARY_STEPS = f"""(cell) => {{ {DOCS_IN}
  const out = []; for (const doc of docsIn(cell)) for (const m of doc.all_models) {{
    const s = typeof m.text === 'string' && m.text.match(/Step (\\d+)\\./); if (s) out.push(Number(s[1])); }}
  return out; }}"""
# the points of the Runs page's loss curve
JS_LOSS_POINTS = f"""(cell) => {{ {DOCS_IN}
  for (const doc of docsIn(cell)) for (const m of doc.all_models)
    if (m.name === 'loss:loss' && m.get_length) return m.get_length(); return 0; }}"""


# what the notebook's outputs send the kernel from now on: "kind:attr:model type" of each change
JS_RECORD_SENT = """() => { window.__sent = []; const manager = Bokeh.Panel.CommManager.prototype;
  const process = manager.process_events;
  manager.process_events = function () {
    for (const e of this._event_buffer) for (const x of (e.events || [e]))
      window.__sent.push(`${x.kind}:${x.attr || ''}:${x.model ? x.model.type : ''}`);
    return process.call(this); }; }"""


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
    """One JupyterLab for this module: a free port of 127.0.0.1, a private root, state and runs folder; stopped
    with its kernels afterwards. Yields (base URL, root, runs)."""
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


@pytest.fixture(scope="module")
def notebook(jupyterlab_server):
    """The five pages' notebook, all its cells run in Chromium (1600 × 1200): yields a namespace with the Playwright
    ``page``, what the browser reported (``seen``), ``cell(i)`` (a locator of cell i), ``element(i)`` (its DOM
    element, scrolled into view, for the JavaScript above), the Runs page's ``run``, and ``new_runs()`` (the run
    folders made since the cells ran). Afterwards every kernel is shut down: nothing trains on."""
    from lab.runs.store import RunStore

    url, root, runs = jupyterlab_server
    run = RunStore(runs).create("notebook")  # written "elsewhere": the Runs page follows it
    run.write_config({"model": {"name": "model-nb"}})
    run.write_status("running", "written elsewhere", step=30, total_steps=100)
    run.append_metrics(*[{"kind": "step", "step": s, "loss": 1.0 / s} for s in (10, 20, 30)])
    before = set(runs.iterdir())
    write_notebook(root / "lab.ipynb", [
        "import lab.ui as ui\nui.extension()",
        "alignment = ui.AlignmentPage(depth=3, width=32, inputs=16, k=12, every=5)\nalignment",
        f"from lab.ui.pages.runs import RunsPage\nruns = RunsPage(run={run.id!r})\nruns",
        "playground = ui.PlaygroundPage(depth=4, width=4, n=400)\nplayground",
        "diffusion = ui.DiffusionPage(alpha_mins='1.0, 0.7')\ndiffusion",
        "rank = ui.RankPage(task='masked', alpha_mins='1.0, 0.6', depth=4, width=64)\nrank"])
    try:
        with browser_page(1600, 1200) as (page, seen):
            page.goto(f"{url}/lab/tree/lab.ipynb", timeout=60_000)
            page.wait_for_function(JS_KERNEL_READY, timeout=60_000)
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            t0, finished = time.monotonic(), {}  # cell index → seconds after Run All when its prompt got a number
            end = deadline(180)
            while len(finished) < 6 and time.monotonic() < end:
                for i, prompt in enumerate(page.evaluate(JS_PROMPTS)):
                    if re.search(r"\d", prompt):
                        finished.setdefault(i, time.monotonic() - t0)
                page.wait_for_timeout(100)
            cells = ", ".join(f"cell {i} done at {t:.1f} s" for i, t in sorted(finished.items()))
            assert len(finished) == 6, f"not every cell ran within {end - t0:.0f} s ({cells}); {seen}"
            print(f"\nafter Run All Cells: {cells}")

            def cell(i: int):
                return page.locator(".jp-Notebook .jp-Cell").nth(i)

            def element(i: int):
                cell(i).scroll_into_view_if_needed()
                return cell(i).element_handle()

            yield SimpleNamespace(page=page, seen=seen, cell=cell, element=element, run=run,
                                  new_runs=lambda: sorted(set(runs.iterdir()) - before))
    finally:
        for kernel in _api(f"{url}/api/kernels"):
            _api(f"{url}/api/kernels/{kernel['id']}", "DELETE")


def in_jupyterlab(test):
    """The marks of a test that reads the notebook in Chromium: ui, slow, five minutes at most on an idle machine
    (scaled by its load: :func:`tests.waiting.scaled`), Chromium needed."""
    for mark in (needs_chromium, pytest.mark.timeout(scaled(300)), pytest.mark.slow, pytest.mark.ui):
        test = mark(test)
    return test


@in_jupyterlab
def test_alignment_page_draws_both_networks_in_jupyterlab_offline(notebook):
    """The two columns' snapshots in a notebook cell, drawn in full (training them in lockstep is the served page's
    browser test and the page's own tests: the cell adds nothing to it but minutes)."""
    page = notebook.page
    # the untrained networks are drawn: both columns' summaries say step 0
    page.wait_for_function(f"(cell) => ({JS_SUMMARY_STEPS})(cell).length === 2", arg=notebook.element(ALIGNMENT),
                           timeout=120_000)
    # and every view laid out in the cell (a figure's view is built after its model arrives)
    page.wait_for_function(f"(cell) => ({JS_PIXELS})(cell).length === 2 * (6 + 2)", arg=notebook.element(ALIGNMENT),
                           polling=250, timeout=60_000)
    # in the cell as when served: the mosaics and pairs coloured, every frame at full size, nothing cut (the loss
    # and accuracy curves are there, empty until training)
    plots = page.evaluate(JS_PIXELS, notebook.element(ALIGNMENT))
    print(f"\nAlignment page in a JupyterLab cell:\n{pixel_report(plots)}")
    frames = [p for p in plots if p["title"] not in ("Loss", "Accuracy")]
    assert len(plots) == 2 * (6 + 2) and len(frames) == 2 * 6, pixel_report(plots)
    assert not pixel_problems(frames), pixel_problems(frames)
    assert not [r for r in notebook.new_runs() if "alignment" in r.name], "nothing trains until Start"
    assert not notebook.seen.external and not notebook.seen.errors, notebook.seen


@in_jupyterlab
def test_runs_page_follows_a_run_in_jupyterlab_offline(notebook):
    page, run = notebook.page, notebook.run
    notebook.cell(RUNS).locator(".tabulator-cell", has_text=run.id).wait_for(timeout=120_000)  # the table
    cell = notebook.element(RUNS)
    page.wait_for_function(f"(cell) => ({JS_LOSS_POINTS})(cell) === 3", arg=cell, timeout=60_000)  # the curve
    run.append_metrics({"kind": "step", "step": 40, "loss": 0.025})
    page.wait_for_function(f"(cell) => ({JS_LOSS_POINTS})(cell) === 4", arg=cell, timeout=60_000)  # follows the file
    assert not notebook.seen.external and not notebook.seen.errors, notebook.seen


@in_jupyterlab
def test_rank_page_draws_a_generative_sweep_in_jupyterlab_offline(notebook):
    """The masked-pixel task's untrained members, read on clean digits: their ranks and probes by layer, the
    schedules, the probe and rank across members and each member's embedding, drawn in the cell (training the sweep
    is the served page's browser test)."""
    page = notebook.page
    cell = notebook.element(RANK)
    page.wait_for_function(f"(cell) => ({JS_PIXELS})(cell).length === 7 + 2", arg=cell, polling=250,
                           timeout=120_000)
    plots = page.evaluate(JS_PIXELS, cell)
    print(f"\nRank page in a JupyterLab cell:\n{pixel_report(plots)}")
    drawn = [p for p in plots if p["title"].startswith(("Rank by layer", "α per block", "Probe accuracy against",
                                                         "Rank vs probe", "α_min"))]
    assert len(drawn) == 4 + 2 and not pixel_problems(drawn), pixel_report(plots)
    assert any(p["title"] == "Loss per member" for p in plots), "a generative task's bars are its losses"
    assert page.evaluate(JS_CELL_TEXT, [cell, "toy MAE"]), "the caption names the structure the members have"
    assert not [r for r in notebook.new_runs() if "rank" in r.name], "nothing trains until Start"
    assert not notebook.seen.external and not notebook.seen.errors, notebook.seen


@in_jupyterlab
def test_playground_trains_live_in_jupyterlab_offline(notebook):
    page, problems = notebook.page, []
    start = notebook.cell(PLAYGROUND).get_by_role("button", name="Start / pause")
    start.wait_for(timeout=60_000)
    cell = notebook.element(PLAYGROUND)
    page.wait_for_function(f"(cell) => ({JS_GRID})(cell) !== null", arg=cell, timeout=60_000)
    grid = page.evaluate(JS_GRID, cell)

    page.evaluate(JS_RECORD_SENT)
    start.click()
    t1 = time.monotonic()
    statuses: list[tuple[float, str]] = []  # (seconds after Start, text) at each change of the status line
    grids: list[tuple[float, int]] = []  # (seconds after Start, pixel hash) at each change of the grid
    # watched until the status line has moved past its first step and the grid has drawn two new frames since it
    # showed one: a condition on the job's progress, so a loaded machine only makes it take longer
    deadline, first_step = t1 + 240, None
    while time.monotonic() < deadline:
        now, status, g = time.monotonic() - t1, page.evaluate(JS_STATUS, cell), page.evaluate(JS_GRID, cell)
        if not statuses or status != statuses[-1][1]:
            statuses.append((now, status))
        if g and (grids[-1][1] if grids else grid["hash"]) != g["hash"]:
            grids.append((now, g["hash"]))
        if first_step is None and _step(status) > 0:
            first_step = now
        # a run can finish within a second on a fast machine: then its last frame is the one to wait for
        finished = "completed" in (status or "")
        if first_step is not None and sum(t >= first_step for t, _ in grids) >= (1 if finished else 2) and \
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
        print(f"\nfirst step shown {first_step:.1f} s after Start; then over {span:.1f} s: {len(moving) - 1} "
              f"status updates ({(len(moving) - 1) / max(span, 1e-9):.1f}/s), {steps:.0f} steps/s seen, "
              f"{len(frames)} new grid frames ({len(frames) / max(span, 1e-9):.1f}/s); last: {last!r}")
        if len(frames) < (1 if finished else 2):  # not only a first frame: the grid keeps following the job
            problems.append(f"the grid showed {len(frames)} new frames in {now - first_step:.1f} s of training")
        if len(moving) < 2 or moving[-1][1] <= moving[0][1]:
            problems.append(f"the status line stopped at step {moving[-1][1]}")
    if not grids:
        problems.append("the grid's pixels did not change while training")
    # the browser sends the kernel its own changes (the click, the clock's answers, layout sizes), never the
    # kernel's changes back: no frame's pixels, hover ranges, titles or streamed points (lab.ui.notebook_sync)
    sent = page.evaluate("() => window.__sent")
    echoed = sorted({e for e in sent if e.startswith(("ModelChanged:data:", "ColumnDataChanged", "ColumnsStreamed",
                                                       "ColumnsPatched", "ModelChanged:text:", "ModelChanged:pixels:",
                                                       "ModelChanged:ranges:", "ModelChanged:title:"))})
    if echoed:
        problems.append(f"the browser sent the kernel's own changes back to it: {echoed}")
    if not any(e.startswith("ModelChanged:drawn:") for e in sent):
        problems.append(f"the frame clock's answers did not reach the kernel: {sorted(set(sent))}")
    start.click()  # pause
    page.wait_for_timeout(500)
    run_files = [p for run in notebook.new_runs() if "playground" in run.name for p in run.rglob("*") if p.is_file()]
    if not run_files:
        problems.append("no run folder was written")
    if notebook.seen.external:
        problems.append(f"requests left the machine: {notebook.seen.external}")
    if notebook.seen.errors:
        problems.append(f"the browser reported errors: {notebook.seen.errors}")
    assert not problems, "\n".join(problems)


@in_jupyterlab
def test_diffusion_page_draws_its_schedules_in_jupyterlab_offline(notebook):
    """Before any training the cell shows every figure at full size, the α schedules drawn (the U-ViTs training in
    lockstep are the served page's browser test)."""
    page = notebook.page
    cell = notebook.element(DIFFUSION)
    page.wait_for_function(f"(cell) => ({JS_PIXELS})(cell).length === 4 + 2 * 2", arg=cell, timeout=120_000)
    plots = page.evaluate(JS_PIXELS, cell)
    print(f"\nDiffusion page in a JupyterLab cell:\n{pixel_report(plots)}")
    (schedules,) = [p for p in plots if p["title"] == "α per residual sub-layer"]
    assert not pixel_problems([schedules]) and schedules["pixels"] > 500, pixel_report(plots)  # two lines drawn
    assert all(p["frame"][0] >= 300 for p in plots), pixel_report(plots)
    assert not [r for r in notebook.new_runs() if "diffusion" in r.name], "nothing trains until Start"
    assert not notebook.seen.external and not notebook.seen.errors, notebook.seen
