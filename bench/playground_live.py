"""The Playground in a real browser: frames per second drawn while the 32 × 32 model trains, and training
throughput with the page open against headless training measured in the same run.

Serves the lab's app on a free port of 127.0.0.1, opens it in Debian's Chromium (Playwright), presses Start and
counts, in the browser, how often the grid's title ("step N") changes (a listener on the Bokeh model, so the count
costs the page nothing). Targets: >= 5 frames/s in the browser, training with the page open >= 85 % of headless (a
bare Trainer). This machine's speed drifts by tens of per cent within a minute (a bare Trainer alone measures 120
to 185 steps/s in successive 2 s windows), so a reference taken before and after one long window says little: the
page trains in ``--windows`` windows, each between two windows in which the job is paused and a bare Trainer trains
in this process, and each page-open window is compared with the two either side (the median of those ratios is
the verdict; all of them are printed). The same job with no page (run folder, metrics, checkpoints and
TensorBoard, but no snapshots asked for), in a child process as the page trains it, is reported too, to separate
what the page costs from what recording a run and its process cost; and the CPU each process used while the page
was open. Snapshots are paced by the browser (the page sends the next once it has painted the last, and asks the job
for it as it sends one), at most one per ``snapshot_every`` training steps (the page's default, 25; ``--snapshot-every``
sets it, to measure what fewer frames give training back).

    python bench/playground_live.py [--windows 5] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
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
from lab.runs.store import Run, RunStore  # noqa: E402
from lab.train.runner import make_trainer  # noqa: E402
from lab.ui.pages.playground import KNOBS  # noqa: E402
from lab.ui.serve import serving_lab  # noqa: E402

JS_COUNT = """() => { window.__frames = 0; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step '))
      m.property('title').change.connect(() => window.__frames++); }"""
JS_TITLE = """() => { let last = null; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step ')) last = m.title; return last; }"""

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


CFG = {"data.n": 4096, "train.epochs": 1000, "train.eval_every": 50, "train.log_every": 5}
CHUNK = CFG["train.eval_every"]


class BareTrainer:
    """The Playground's default experiment trained with no page and no job (a bare Trainer), in this process, in
    windows of a given length: the reference each page-open window is compared with."""

    def __init__(self) -> None:
        self.trainer = make_trainer(apply_overrides(ExperimentConfig(), {**CFG, "train.max_steps": 10**7}))
        self.trainer.fit(steps=CHUNK)

    def rate(self, seconds: float) -> float:
        """Steps/s over about ``seconds``, in whole chunks of ``eval_every`` steps (each evaluates once, as the
        job's training does)."""
        step0, t0 = self.trainer.step, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            self.trainer.fit(steps=CHUNK)
        return (self.trainer.step - step0) / (time.perf_counter() - t0)


def headless_job_rate(seconds: float) -> float:
    """Steps/s of the same experiment as a job with no page: run folder, metrics, checkpoints, TensorBoard, and
    on-demand snapshots that nobody asks for (what the Playground starts, minus the page), in a child process as the
    served page starts it."""
    runs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    job = ChildJob.training(apply_overrides(ExperimentConfig(), CFG), RunStore(runs).create("headless"),
                            cadence={"nodes": (10, 0.0), "similarity": (0, 2.0)},
                            on_demand=("nodes", "similarity")).start()
    while job.status().get("step", 0) < 20:
        time.sleep(0.05)
    t0 = time.time()
    time.sleep(seconds)
    steps_per_s = rate(runs, t0, time.time())
    job.stop()
    return steps_per_s


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


def rate(runs: Path, t0: float, t1: float) -> float:
    """Training steps/s of the one run in ``runs`` between wall-clock times ``t0`` and ``t1``: from its step
    records (every ``log_every`` steps, each with its time), exact where status.json's step lags by up to its
    one-second heartbeat (a tenth of an 8 s window)."""
    run = Run(next(runs.iterdir()))
    timed = [(r["time"], r["step"]) for r in run.metric_records() if r.get("kind") == "step" and t0 <= r["time"] <= t1]
    if len(timed) < 2:
        raise RuntimeError(f"the run recorded {len(timed)} step(s) between the window's ends")
    (first_t, first_step), (last_t, last_step) = timed[0], timed[-1]
    return (last_step - first_step) / (last_t - first_t)


def wait_state(runs: Path, state: str, timeout: float = 60.0) -> None:
    """Wait until the one run in ``runs`` says it is ``state`` (its status.json)."""
    deadline = time.monotonic() + timeout
    status = next(runs.iterdir()) / "status.json"
    while json.loads(status.read_text()).get("state") != state:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run did not become {state!r} within {timeout:g} s")
        time.sleep(0.05)


def interleaved(page, runs: Path, toggle, bare: BareTrainer, windows: int, seconds: float,
                count_js: str) -> dict[str, object]:
    """Alternate ``windows`` pairs of windows of ``seconds``: the page training the one run in ``runs`` (its
    training steps/s from its step records (:func:`rate`), the frames the browser drew, counted by ``count_js`` into
    ``window.__frames``, and the cores each kind of process used, :func:`cpu_seconds`), then the job paused
    (``toggle`` presses Start / pause) while ``bare`` trains in this process. This machine's speed drifts by tens of
    per cent within a minute, so each page-open window is compared with the bare windows either side of it."""
    page.evaluate(count_js)
    opened, frames, references, cpu, total = [], [], [bare.rate(seconds)], {}, 0.0
    for _ in range(windows):
        wait_state(runs, "running")
        time.sleep(1.0)  # the first snapshots after a resume
        frames0, cpu0 = page.evaluate("() => window.__frames"), cpu_seconds()
        t0, wall0 = time.perf_counter(), time.time()
        time.sleep(seconds)
        elapsed = time.perf_counter() - t0
        frames1, cpu1 = page.evaluate("() => window.__frames"), cpu_seconds()
        opened.append(rate(runs, wall0, time.time()))
        frames.append((frames1 - frames0) / elapsed)
        for name, used in cpu1.items():
            cpu[name] = cpu.get(name, 0.0) + used - cpu0.get(name, 0.0)
        total += elapsed
        toggle()
        wait_state(runs, "paused")
        references.append(bare.rate(seconds))
        toggle()
    ratios = [o / ((a + b) / 2) for o, a, b in zip(opened, references[:-1], references[1:], strict=True)]
    return {"fps": sum(frames) / len(frames), "open": sum(opened) / len(opened),
            "bare": sum(references) / len(references), "ratio": statistics.median(ratios),
            "ratios": ratios, "cpu": {name: used / total for name, used in cpu.items()}}


def report(title: str, where: str, result: dict[str, object], child: float | None = None) -> str:
    """The table of one run of :func:`interleaved`."""
    fps, ratio, ratios = result["fps"], result["ratio"], result["ratios"]
    rows = [
        ["frames drawn in the browser / s", fps, ">= 5 " + ("PASS" if fps >= 5 else "FAIL")],
        [f"training steps/s, {where} (mean of the windows)", result["open"], ""],
        ["training steps/s, bare Trainer (mean of the windows)", result["bare"], ""],
        [f"{where} / bare Trainer either side (median of the windows)", ratio,
         ">= 0.85 " + ("PASS" if ratio >= 0.85 else "FAIL")],
        ["  the windows' ratios, lowest to highest", " ".join(f"{r:.3f}" for r in sorted(ratios)), ""],
    ]
    if child is not None:
        rows.append(["training steps/s, the same job with no page, in a child", child, ""])
    rows += [[f"CPU while {where}: {name} (cores)", value, ""] for name, value in sorted(result["cpu"].items())]
    return title + "\n" + table(["measure", "value", "target"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=5, help="page-open windows, each between two bare ones")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each window")
    parser.add_argument("--snapshot-every", type=int, default=None,
                        help="the page's snapshot_every (default: the page's own)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    torch.set_num_threads(1)
    bare = BareTrainer()
    child = headless_job_rate(10)
    runs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    with serving_lab(runs, max_jobs=1) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        every = "" if args.snapshot_every is None else f"&snapshot_every={args.snapshot_every}"
        page.goto(f"{url}/apps?page=Playground{every}", timeout=120_000)
        page.wait_for_function(f"() => ({JS_TITLE})() !== null", timeout=120_000)
        start = page.get_by_role("button", name="Start / pause")
        start.click()
        page.wait_for_function(f"() => {{ const t = ({JS_TITLE})(); return t && t !== 'step 0'; }}",
                               timeout=120_000)
        result = interleaved(page, runs, start.click, bare, args.windows, args.seconds, JS_COUNT)
        start.click()
        browser.close()
    every = args.snapshot_every or KNOBS["snapshot_every"].parameter.default
    print(report(f"Playground default (32 x 32, spiral n=4096, snapshot every {every} steps) in Chromium, "
                 f"{args.windows} windows of {args.seconds:g} s", "page open", result, child))


if __name__ == "__main__":
    main()
