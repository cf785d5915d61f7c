"""The Playground in a real browser: frames per second drawn while the 32 × 32 model trains, and training
throughput with the page open against headless training measured in the same run.

Serves the lab's app on a free port of 127.0.0.1, opens it in Debian's Chromium (Playwright), presses Start and
counts, in the browser, how often the grid's title ("step N") changes (a listener on the Bokeh model, so the count
costs the page nothing). Targets: >= 5 frames/s in the browser, training with the page open >= 85 % of headless (a
bare Trainer). The same job with no page (run folder, metrics, checkpoints and TensorBoard, but no snapshots asked
for), in a child process as the page trains it and in a thread, is reported too, to separate what the page costs
from what recording a run and its process cost; and the CPU each process used while the page was open. Each
reference is measured before and after the browser run and averaged. Snapshots are paced by the browser (the page sends
the next once it has painted the last, and asks the job for it as it sends one), at most one per ``snapshot_every``
(10) training steps.

    python bench/playground_live.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import table  # noqa: E402
from lab.config import ExperimentConfig, apply_overrides  # noqa: E402
from lab.jobs.child import ChildJob  # noqa: E402
from lab.jobs.runner import make_trainer  # noqa: E402
from lab.jobs.thread import ThreadJob  # noqa: E402
from lab.runs.store import RunStore  # noqa: E402
from lab.ui.serve import serving_lab  # noqa: E402

JS_COUNT = """() => { window.__frames = 0; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.startsWith('step '))
      m.property('text').change.connect(() => window.__frames++); }"""
JS_TITLE = """() => { let last = null; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.startsWith('step ')) last = m.text; return last; }"""

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


CFG = {"data.n": 4096, "train.epochs": 1000, "train.eval_every": 50, "train.log_every": 5}


def headless_rate(steps: int) -> float:
    """Steps/s of the Playground's default experiment trained with no page and no job (a bare Trainer)."""
    trainer = make_trainer(apply_overrides(ExperimentConfig(), {**CFG, "train.max_steps": steps}))
    trainer.fit(steps=10)
    t0 = time.perf_counter()
    trainer.fit(steps=steps)
    return steps / (time.perf_counter() - t0)


def headless_job_rate(seconds: float, child: bool) -> float:
    """Steps/s of the same experiment as a job with no page: run folder, metrics, checkpoints, TensorBoard, and
    on-demand snapshots that nobody asks for (what the Playground starts, minus the page), in a child process as the
    served page starts it, or in a thread of this one."""
    runs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    kind = ChildJob.training if child else ThreadJob
    job = kind(apply_overrides(ExperimentConfig(), CFG), RunStore(runs).create("headless"),
               cadence={"nodes": (10, 0.0), "similarity": (0, 2.0)}, on_demand=("nodes", "similarity")).start()
    while job.status().get("step", 0) < 20:
        time.sleep(0.05)
    step0, t0 = job.status()["step"], time.perf_counter()
    time.sleep(seconds)
    rate = (job.status()["step"] - step0) / (time.perf_counter() - t0)
    job.stop()
    return rate


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process (the server and Playwright's driver thread), its children (the training
    child, the fork server; for a notebook, JupyterLab's server and the kernel) and Chromium's processes, by kind."""
    out: dict[str, float] = {}
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            times, cmd = proc.cpu_times(), proc.cmdline()
        except psutil.Error:
            continue
        if proc.pid == me.pid:
            name = "server (this process)"
        elif "chromium" in " ".join(cmd[:1]):
            kind = next((a.split("=", 1)[1] for a in cmd if a.startswith("--type=")), "browser")
            name = f"chromium {kind}"
        elif "node" in " ".join(cmd[:1]) or "playwright" in " ".join(cmd):
            name = "playwright driver"
        elif "jupyterlab" in cmd:
            name = "JupyterLab server"
        elif "ipykernel_launcher" in " ".join(cmd):
            name = "notebook kernel (the cell's session)"
        else:
            name = "training child and fork server"
        out[name] = out.get(name, 0.0) + times.user + times.system
    return out


def measure(page, runs: Path, seconds: float, count_js: str) -> tuple[float, float, dict[str, float]]:
    """Over ``seconds`` of a page training the one run in ``runs``: the frames per second the browser drew (grid
    titles counted by ``count_js``, which sets ``window.__frames``), the training steps/s (the run's status.json) and
    the cores each kind of process used (:func:`cpu_seconds`)."""
    status = next(runs.iterdir()) / "status.json"
    page.evaluate(count_js)
    cpu0 = cpu_seconds()
    step0, t0 = json.loads(status.read_text())["step"], time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - t0
    titles, step1 = page.evaluate("() => window.__frames"), json.loads(status.read_text())["step"]
    cpu = {name: (used - cpu0.get(name, 0.0)) / elapsed for name, used in cpu_seconds().items()}
    return titles / elapsed, (step1 - step0) / elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    torch.set_num_threads(1)
    headless_before = headless_rate(300)
    child_before, thread_before = headless_job_rate(10, child=True), headless_job_rate(10, child=False)
    runs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    with serving_lab(runs, max_jobs=1) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{url}/apps?page=Playground", timeout=120_000)
        page.wait_for_function(f"() => ({JS_TITLE})() !== null", timeout=120_000)
        page.get_by_role("button", name="Start / pause").click()
        page.wait_for_function(f"() => {{ const t = ({JS_TITLE})(); return t && t !== 'step 0'; }}",
                               timeout=120_000)
        fps, open_rate, cpu = measure(page, runs, args.seconds, JS_COUNT)
        page.get_by_role("button", name="Start / pause").click()
        browser.close()
    # each reference measured before and after the browser run, averaged (the machine's speed drifts)
    headless = (headless_before + headless_rate(300)) / 2
    child = (child_before + headless_job_rate(10, child=True)) / 2
    thread = (thread_before + headless_job_rate(10, child=False)) / 2
    print(f"Playground default (32 x 32, spiral n=4096, snapshot every 10 steps), {args.seconds:.0f} s in Chromium")
    print(table(["measure", "value", "target"], [
        ["frames drawn in the browser / s", fps, ">= 5 " + ("PASS" if fps >= 5 else "FAIL")],
        ["training steps/s, page open", open_rate, ""],
        ["training steps/s, bare Trainer (no job, no page)", headless, ""],
        ["training steps/s, the same job with no page, in a child", child, ""],
        ["training steps/s, the same job with no page, in a thread", thread, ""],
        ["page open / bare Trainer", open_rate / headless,
         ">= 0.85 " + ("PASS" if open_rate / headless >= 0.85 else "FAIL")],
        ["page open / same job in a child, no page", open_rate / child, ""],
        *([f"CPU while the page was open: {name} (cores)", value, ""] for name, value in sorted(cpu.items())),
    ]))


if __name__ == "__main__":
    main()
