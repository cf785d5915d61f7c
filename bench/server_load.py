"""The served lab under load: how long a control takes to show its effect in the browser while two jobs train.

Serves the lab's app on a free port of 127.0.0.1 (at most two jobs) and drives Debian's Chromium (Playwright) with
three sessions in one browser: two Playgrounds (16 × 16 model) that both train, and the Data page. In the first
Playground (``shortcut=linear``) the alpha_min slider is moved one step with the keyboard, again and again, and
each time the bench measures, in the browser, the milliseconds from the key press to the frame in which the α
chart's data source holds the new last α (a round trip: browser → server → param → HoloViews → browser). The same
measurement with that one session open and nothing training is the reference. The loaded condition runs twice: the
jobs in the server's threads, then in child processes (:class:`~lab.jobs.child.ChildJob`). A last condition starts
the same two jobs in child processes without a page (nobody draws them) while only the measured session is open: what
their training alone costs the sessions, apart from drawing their snapshots. Also reported: the training steps/s of the
two jobs during the measurement, from their status.json heartbeats. Target: p95 <= 300 ms.

    python bench/server_load.py [--presses 40] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table  # noqa: E402
from lab.ui.serve import serving_lab  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TARGET_MS = 300.0
MEASURED = "page=Playground&depth=16&width=16&shortcut=linear&alpha_min=0.5"
OTHER = "page=Playground&depth=16&width=16"
DATA = "page=Data"

JS_ALPHA = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.data && m.data.alpha) return Array.from(m.data.alpha); return null; }"""
JS_TITLE = """() => { let last = null; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step ')) last = m.title; return last; }"""
JS_DATA_READY = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(' train (circles)')) return true; return false; }"""
# the time of the last key press, taken by the page itself (capture phase: before any widget sees it)
JS_CLOCK = """() => { window.__keydown = 0;
    document.addEventListener('keydown', () => { window.__keydown = performance.now(); }, true); }"""
# true once the α chart's last value is the expected one; notes the time of the frame that saw it
JS_SEEN = f"""(expected) => {{ const a = ({JS_ALPHA})();
    if (a && Math.abs(a[a.length - 1] - expected) < 1e-4) {{ window.__seen = performance.now(); return true; }}
    return false; }}"""


def open_page(browser, url: str, query: str, errors: list[str]):
    """A new page of ``browser`` on the lab with ``query``, once its session has drawn."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{url}/apps?{query}", timeout=120_000)
    ready = JS_DATA_READY if query.startswith(DATA) else f"() => ({JS_TITLE})() !== null && ({JS_ALPHA})() !== null"
    page.wait_for_function(ready, timeout=120_000)
    return page


def start_training(page) -> None:
    """Press Start on a Playground and wait until its grid shows a trained snapshot."""
    page.get_by_role("button", name="Start / pause").click()
    page.wait_for_function(f"() => {{ const t = ({JS_TITLE})(); return t && t !== 'step 0'; }}", timeout=120_000)


def slider_latencies(page, presses: int, pause_s: float, budget_s: float) -> list[float]:
    """Milliseconds from each alpha_min key press to the α chart showing the new value.

    The slider moves one step right, then one step left, and so on (0.5 ↔ 0.55), so it never reaches a bound.
    Stops early, after at least 5 changes, when ``budget_s`` seconds have passed (a slow machine).
    """
    page.evaluate(JS_CLOCK)
    # visible slider handles: the Model section's depth, width, alpha_min, ... (Data and Training are collapsed)
    handle = page.locator(".noUi-handle").filter(visible=True).nth(2)
    start = page.evaluate(JS_ALPHA)[-1]
    out: list[float] = []
    t0 = time.perf_counter()
    for i in range(presses):
        if len(out) >= 5 and time.perf_counter() - t0 > budget_s:
            break
        key, expected = ("ArrowRight", start + 0.05) if i % 2 == 0 else ("ArrowLeft", start)
        handle.focus()
        page.keyboard.press(key)
        page.wait_for_function(JS_SEEN, arg=expected, polling="raf", timeout=60_000)
        out.append(page.evaluate("() => window.__seen - window.__keydown"))
        time.sleep(pause_s)
    return out


class ErrorLog(logging.Handler):
    """Keeps the server's error messages (callbacks that raised while the bench drove the pages)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        cause = f": {type(error).__name__}: {error}" if error is not None else ""
        self.messages.append(record.getMessage().splitlines()[0][:160] + cause[:200])


def heartbeats(runs: Path) -> dict[str, tuple[int, float]]:
    """``run id → (step, heartbeat time)`` of every run folder's status.json."""
    out = {}
    for status in runs.glob("*/status.json"):
        with open(status) as f:
            s = json.load(f)
        out[status.parent.name] = (int(s.get("step", 0)), float(s["heartbeat"]))
    return out


def summary(name: str, ms: list[float]) -> list[object]:
    """A table row: median, p95 and max latency and the verdict against the target."""
    p95 = float(np.percentile(ms, 95))
    return [name, len(ms), median(ms), p95, max(ms), f"<= {TARGET_MS:.0f} " + ("PASS" if p95 <= TARGET_MS else "FAIL")]


def one_run(args: argparse.Namespace, errors: list[str]) -> tuple[list[list[object]], list[list[object]]]:
    """Every condition once: the latency rows (one per condition) and the jobs' training rates."""
    from playwright.sync_api import sync_playwright

    rows, rate_rows, reference = [], [], None
    for processes in (False, True):  # the jobs in the server's threads, then in child processes
        where = "child processes" if processes else "threads"
        runs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
        with serving_lab(runs, max_jobs=2, processes=processes) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            measured = open_page(browser, url, MEASURED, errors)
            if reference is None:
                reference = slider_latencies(measured, args.presses, args.pause, args.budget)
                rows.append(summary("1 session, nothing training (reference)", reference))
            other = open_page(browser, url, OTHER, errors)
            open_page(browser, url, DATA, errors)
            start_training(measured)
            start_training(other)
            before = heartbeats(runs)
            loaded = slider_latencies(measured, args.presses, args.pause, args.budget)
            after = heartbeats(runs)
            for page in (measured, other):
                page.get_by_role("button", name="Start / pause").click()
            browser.close()
        rows.append(summary(f"3 sessions, 2 jobs training in {where}", loaded))
        rates = [(after[r][0] - before[r][0]) / max(after[r][1] - before[r][1], 1e-9) for r in sorted(before)]
        rate_rows += [[f"job {i + 1} in {where}", rate] for i, rate in enumerate(rates)]
        rows[-1].append(np.percentile(loaded, 95) / np.percentile(reference, 95))
        shutil.rmtree(runs, ignore_errors=True)
    # what the children's training alone costs the sessions: the same two jobs, started without a page (nobody draws
    # their snapshots), while only the measured session is open
    runs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    with serving_lab(runs, max_jobs=2, processes=True) as url, sync_playwright() as p:
        from lab.jobs.manager import get_manager
        from lab.ui.pages.playground import PlaygroundPage

        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        measured = open_page(browser, url, MEASURED, errors)
        cfg = PlaygroundPage(depth=16, width=16).config()
        jobs = [get_manager().start_thread(cfg) for _ in range(2)]
        while min(j.status().get("step", 0) for j in jobs) < 10:
            time.sleep(0.1)
        before = heartbeats(runs)
        headless = slider_latencies(measured, args.presses, args.pause, args.budget)
        after = heartbeats(runs)
        for job in jobs:
            job.stop()
        browser.close()
    rows.append(summary("1 session, 2 jobs training in child processes, not drawn", headless))
    rows[-1].append(np.percentile(headless, 95) / np.percentile(reference, 95))
    rates = [(after[r][0] - before[r][0]) / max(after[r][1] - before[r][1], 1e-9) for r in sorted(before)]
    rate_rows += [[f"job {i + 1} in child processes, not drawn", rate] for i, rate in enumerate(rates)]
    shutil.rmtree(runs, ignore_errors=True)
    rows[0].append(1.0)
    return rows, rate_rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status (0; the tables say whether the target was met).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presses", type=int, default=40, help="slider changes measured per condition")
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between two changes")
    parser.add_argument("--budget", type=float, default=45.0, help="at most this many seconds per condition")
    parser.add_argument("--runs", type=int, default=1, help="repeat every condition this many times (a fresh "
                                                             "server and browser each), and report the spread")
    args = parser.parse_args(argv)

    errors: list[str] = []
    server_errors = ErrorLog()
    logging.getLogger().addHandler(server_errors)
    t_bench = time.perf_counter()
    results = [one_run(args, errors) for _ in range(args.runs)]
    logging.getLogger().removeHandler(server_errors)
    print(f"alpha_min key press → α chart updated in the browser; up to {args.presses} changes per condition, "
          f"{args.pause:.2f} s apart; {args.runs} run(s); {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; bench took {time.perf_counter() - t_bench:.0f} s")
    for k, (rows, rate_rows) in enumerate(results):
        print(f"\nrun {k + 1}")
        print(table(["condition", "changes", "median ms", "p95 ms", "max ms", "p95 target", "p95 / reference"],
                    rows))
        print()
        print(table(["job (Playground 16 x 16, spiral n=4096)", "steps/s during the measurement"], rate_rows))
    if args.runs > 1:  # per condition: the runs' medians and p95s, their median and range
        spread = []
        for i, row in enumerate(results[0][0]):
            p50s, p95s = [r[0][i][2] for r in results], [r[0][i][3] for r in results]
            spread.append([row[0], median(p50s), f"{min(p50s):.0f}-{max(p50s):.0f}", median(p95s),
                           f"{min(p95s):.0f}-{max(p95s):.0f}", f"{sum(p <= TARGET_MS for p in p95s)}/{args.runs}"])
        print(f"\nover {args.runs} runs")
        print(table(["condition", "median of p50 ms", "p50 range", "median of p95 ms", "p95 range",
                     f"runs with p95 <= {TARGET_MS:.0f}"], spread))
    if errors:
        print(f"browser console errors: {len(errors)}; first: {errors[0]}")
    if server_errors.messages:
        print(f"server errors: {len(server_errors.messages)}; first: {server_errors.messages[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
