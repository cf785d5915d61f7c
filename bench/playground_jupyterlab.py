"""The Playground in a JupyterLab cell: frames per second drawn in Chromium while the 32 × 32 model trains, and
training throughput with the cell showing against a bare Trainer measured in the same run.

The served page's benchmark (``playground_live.py``) in a notebook instead: a private JupyterLab on a free port of
127.0.0.1 (the browser tests' server, :mod:`tests.ui.jupyter`) opens a notebook whose cell shows
``ui.PlaygroundPage()`` with its defaults; Chromium runs the cells, presses the cell's Start and counts, in the
browser, how often the grid's title ("step N") changes. The job trains in a child of the kernel, as a served page's
does in a child of the server, and its snapshots reach the cell through the kernel's comms, paced by the browser as
on the served page. Targets: >= 5 frames/s, training >= 85 % of a bare Trainer, measured as the served page's
benchmark does (windows of the cell training, each between two windows of a bare Trainer while the job is paused),
and the CPU each process used while the cell trained.

    python bench/playground_jupyterlab.py [--windows 5] [--seconds 8]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.playground_live import CHROMIUM_ARGS, BareTrainer, interleaved, report  # noqa: E402
from lab.ui.pages.playground import KNOBS  # noqa: E402
from tests.ui.jupyter import JS_KERNEL_READY, jupyterlab, write_notebook  # noqa: E402

# every Bokeh document the notebook shows (each output is a document of its own)
DOCS = "[...new Set(Bokeh.index.roots.map(v => v.model.document))]"
JS_TITLE = f"""() => {{ if (!window.Bokeh || !Bokeh.index) return null; let last = null;
  for (const doc of {DOCS}) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step ')) last = m.title; return last; }}"""
JS_COUNT = f"""() => {{ window.__frames = 0; for (const doc of {DOCS}) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step '))
      m.property('title').change.connect(() => window.__frames++); }}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=5, help="cell-training windows, each between two bare ones")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each window")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    torch.set_num_threads(1)
    bare = BareTrainer()
    base = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    root, state, runs = base / "root", base / "jupyter", base / "runs"
    root.mkdir()
    state.mkdir()
    write_notebook(root / "playground.ipynb", ["import lab.ui as ui\nui.extension()",
                                               "playground = ui.PlaygroundPage()\nplayground"])
    with jupyterlab(root, state, env={"LAB_RUNS_DIR": str(runs)}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{url}/lab/tree/playground.ipynb", timeout=120_000)
        page.wait_for_function(JS_KERNEL_READY, timeout=120_000)
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        page.wait_for_function(f"() => ({JS_TITLE})() !== null", timeout=180_000)
        cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
        start = cell.get_by_role("button", name="Start / pause")
        start.scroll_into_view_if_needed()
        start.click()
        page.wait_for_function(f"() => {{ const t = ({JS_TITLE})(); return t && t !== 'step 0'; }}",
                               timeout=120_000)
        result = interleaved(page, runs, start.click, bare, args.windows, args.seconds, JS_COUNT)
        start.click()
        browser.close()
    every = KNOBS["snapshot_every"].parameter.default
    print(report(f"Playground default (32 x 32, spiral n=4096, snapshot every {every} steps) in a JupyterLab cell, "
                 f"{args.windows} windows of {args.seconds:g} s", "cell training", result))


if __name__ == "__main__":
    main()
