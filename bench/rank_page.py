"""The Rank page while a 6-member α_min sweep trains: how long a control takes to show its effect in the browser.

Serves the lab's app on a free port of 127.0.0.1 and drives Debian's Chromium (Playwright) on ``?page=Rank`` with the
page's defaults (six members, α_min 1.0 … 0.5, 32 × 32 residual MLPs on 16,384 spiral points). The measured control
is the rank measure (a view setting): each change must retitle the rank-by-layer plot, and the bench times, from
Python, the round trip from selecting the option to the new title in the page (browser → server → param → Bokeh →
browser; Playwright's own overhead is in both conditions). The reference is the same measurement with nothing
training. Also reported: the sweep's training steps/s during the measurement. Target: p95 <= 300 ms.

    python bench/rank_page.py [--changes 30]
"""

from __future__ import annotations

import argparse
import json
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
JS_TITLE = """(want) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.startsWith('Rank by layer: ' + want)) return true; return false; }"""
LABELS = {"effective_rank": "effective rank", "eq6_entropy": "Eq. 6 entropy"}


def latencies(page, changes: int, pause_s: float) -> list[float]:
    """Round trips (ms) of ``changes`` switches of the rank measure."""
    select = page.locator("select").filter(has=page.locator("option[value='eq6_entropy']")).first
    out, measure = [], "effective_rank"
    for _ in range(changes):
        measure = "eq6_entropy" if measure == "effective_rank" else "effective_rank"
        t0 = time.perf_counter()
        select.select_option(measure)
        page.wait_for_function(JS_TITLE, arg=LABELS[measure], timeout=30_000, polling=5)
        out.append((time.perf_counter() - t0) * 1000)
        time.sleep(pause_s)
    return out


def sweep_step(runs: Path) -> int:
    """The step of the newest sweep folder's status (0 before one exists)."""
    folders = sorted(p for p in runs.iterdir() if p.name.endswith("-sweep")) if runs.exists() else []
    status = folders[-1] / "status.json" if folders else None
    return json.loads(status.read_text()).get("step", 0) if status and status.exists() else 0


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=30, help="control changes measured per condition")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between two changes")
    args = parser.parse_args(argv)
    runs = Path(tempfile.mkdtemp()) / "runs"
    rows, p95 = [], {}
    with serving_lab(runs, max_jobs=2) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{url}/apps?page=Rank&epochs=1000", timeout=120_000)
        page.wait_for_function(JS_TITLE, arg=LABELS["effective_rank"], timeout=120_000)
        idle = latencies(page, args.changes, args.pause)
        page.get_by_role("button", name="Start / pause").click()
        deadline = time.monotonic() + 60
        while sweep_step(runs) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        s0, t0 = sweep_step(runs), time.monotonic()
        loaded = latencies(page, args.changes, args.pause)
        steps_per_s = (sweep_step(runs) - s0) / (time.monotonic() - t0)
        page.get_by_role("button", name="Start / pause").click()
        browser.close()
    for name, ms in (("idle (reference)", idle), ("6-member sweep training", loaded)):
        p95[name] = float(np.percentile(ms, 95))
        rows.append([name, len(ms), median(ms), p95[name], max(ms)])
    print(table(["condition", "changes", "median ms", "p95 ms", "max ms"], rows))
    ratio = p95["6-member sweep training"] / p95["idle (reference)"]
    ok = p95["6-member sweep training"] <= TARGET_MS
    print(f"\nsweep: {steps_per_s:.1f} ensemble steps/s while measured; p95 loaded / idle = {ratio:.2f}; "
          f"target p95 <= {TARGET_MS:.0f} ms: {'PASS' if ok else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
