"""The served lab beside a hostile runs folder: how fast another session answers, and how much memory the server takes.

A runs folder written by others may hold a named pipe in place of a run's status, config and metrics, a
``metrics.jsonl`` of about 200 MB, a snapshot (``.npz``) whose 0.5 MB deflate into 512 MB, a picture of 150 MB, a
``nodes`` snapshot of 268 kB declaring 2,048 tiles per layer for a run of 32, a config nested 900 levels deep, two
runs whose configs hold 20,000 keys each, and thousands of runs. The bench serves the lab's app twice on free ports
of 127.0.0.1 — over a runs folder of one run (the reference) and over such a folder — and drives Debian's Chromium
(Playwright): a first session opens the Runs page and times its first row, then, in the hostile case, opens the 200 MB
run (its curves), the run with the snapshot bomb, the one with the picture, the one with the oversized nodes
snapshot, the deep one, and the comparison of the two wide ones, while a second session's Playground measures, in
the browser, the milliseconds from an ``alpha_min`` key press to the α chart holding the new value (the round trip
of :mod:`bench.server_load`). Reported: the second session's page load and its p50/p95 latency in both cases with
their ratio, the server process's peak memory (resident set, sampled every 50 ms) above its memory before the pages
opened, the seconds until the Runs page showed its first row (the server's first page, then a page opened on the
serving server; the reference's folder holds one run), and the cost of
reading the listing of N runs: the first scan and a scan of the unchanged folders. Targets: the second session
answers within 1 s (p95), peak memory under 1.5 GB, the Runs page's first row within 2 s.

A third condition opens every hostile page input at once, each in a session of its own, before the second session is
measured: the Alignment page from a link asking for sizes that would take minutes (``width=1024&depth=32&inputs=512&
k=64``) and one carrying a 40 kB data folder; checkpoint analyses of a 2 MB ``.pt`` whose deflated entry declares a
2 GB tensor, of a safetensors file declaring a million empty tensors, and of a ``--blocks`` pattern of 4,000 ``[``
(the browser's own limit is 5,000 characters). Reported beside the rest: the seconds until the URL-sized Alignment page
first painted (its sidebar's text) and until its preview arrived. Target: first paint within 2 s.

On the reference's server, the Alignment page and the Playground are each opened five times (``--opens``), in turn:
the seconds until the server answered the page's document request (the session made, its document built), and the
browser's from ``goto`` to the sidebar's text ("Start / pause") visible; for the Alignment page also until its
figures were in the page and its untrained preview drawn (each open waits for it: no preview competes with the
next). Reported: median and max of each. Targets: the Alignment page's answer within 2 s, its first paint within
1.5 times the Playground's.

    python bench/hostile_runs.py [--runs 3000] [--metrics-mb 197]
    python bench/hostile_runs.py --first-paint-only [--opens 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import median, table  # noqa: E402
from bench.server_load import CHROMIUM, CHROMIUM_ARGS, MEASURED, open_page, slider_latencies  # noqa: E402
from lab.runs.catalog import RunCatalog  # noqa: E402
from lab.runs.store import Run, RunStore  # noqa: E402
from lab.ui.serve import serving_lab  # noqa: E402

ANSWER_MS = 1000.0
MEMORY_GB = 1.5
FIRST_ROW_S = 2.0
FIRST_PAINT_S = 2.0
ANSWER_S = 2.0
PAINT_RATIO = 1.5
PAINTED = ("Alignment", "Playground")
"""The pages whose first paint is measured, the first against the second."""
SIDEBAR = "Start / pause"
"""The text of the sidebar's first button: visible, the page has painted its sidebar."""
JS_FIGURES = """(n) => { let k = 0; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.renderers !== undefined && m.x_range !== undefined) k++; return k >= n; }"""
ALIGNMENT_FIGURES = 2 * 6 + 2 * 2
"""The Alignment page's figures: six views and two curves per network."""
JS_TEXT = """(needle) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(needle)) return true; return false; }"""


def hostile_folder(root: Path, runs: int, metrics_mb: int) -> dict[str, str]:
    """Write the hostile runs folder; returns the ids of its special runs."""
    store = RunStore(root)
    ids = {}
    fifo = store.create("fifo")
    for entry in ("status.json", "config.json", "metrics.jsonl"):
        os.mkfifo(fifo.path / entry)
    ids["fifo"] = fifo.id
    big = store.create("big")
    big.write_config({"name": "big", "model": {"name": "residual_mlp"}})
    big.write_status("completed", "done", step=0)
    line_bytes, step = 0, 0
    with open(big.path / "metrics.jsonl", "w") as f:
        while line_bytes < metrics_mb * 10**6:
            step += 1
            text = json.dumps({"kind": "step", "step": step, "epoch": step // 1000, "loss": 1.0 / step,
                               "lr": 0.01, "time": step * 0.01}) + "\n"
            if step % 500 == 0:
                text += json.dumps({"kind": "eval", "step": step, "train_loss": 1.0 / step, "test_loss": 1.1 / step,
                                    "train_acc": 0.9, "test_acc": 0.88}) + "\n"
            f.write(text)
            line_bytes += len(text)
    ids["big"] = big.id
    bomb = store.create("bomb")
    bomb.write_config({"name": "bomb", "model": {"name": "residual_mlp"}})
    bomb.write_status("completed", "done", step=5)
    snapshot = bomb.path / "snapshots" / "nodes-000000005.npz"
    with zipfile.ZipFile(snapshot, "w", compression=zipfile.ZIP_DEFLATED) as zf, \
            zf.open("maps.npy", "w", force_zip64=True) as member:
        np.lib.format.write_array_header_2_0(member, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (128, 1024, 32, 32)})
        for _ in range(512):
            member.write(bytes(1 << 20))
    ids["bomb"] = bomb.id
    picture = store.create("picture")
    picture.write_config({"name": "picture", "model": {"name": "mae_vit_tiny_patch4_32"}})
    picture.write_status("running", "pretraining", step=20)
    (picture.path / "figures").mkdir()
    with open(picture.path / "figures" / "reconstruction-000000020.png", "wb") as f:
        f.truncate(150 * 10**6)
    ids["picture"] = picture.id
    tiles = store.create("tiles")  # 2,048 tiles per layer declared, for a run whose layers have 32
    tiles.write_config({"name": "tiles", "model": {"name": "residual_mlp", "depth": 4, "width": 32}})
    tiles.write_status("completed", "done", step=10)
    rng = np.random.default_rng(0)
    tiles.save_snapshot("nodes", 10, {"maps": rng.standard_normal((5, 2048, 4, 4), np.float32),
                                      "weights": np.zeros((5, 2048, 2048), np.float16),
                                      "decision": rng.random((4, 4), np.float32), "limit": np.float32(1.0)})
    ids["tiles"] = tiles.id
    deep = store.create("deep")
    (deep.path / "config.json").write_text('{"config": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}")
    deep.write_status("completed", "done", step=10)
    ids["deep"] = deep.id
    for name in ("wide-a", "wide-b"):
        wide = store.create(name)
        (wide.path / "config.json").write_text(json.dumps({"config": {f"k{i}": i for i in range(20_000)}}))
        wide.write_status("completed", "done", step=10)
        ids[name] = wide.id
    ordinary(root, runs)
    return ids


def ordinary(root: Path, runs: int) -> None:
    """Write ``runs`` small finished runs into ``root``."""
    for i in range(runs):
        run = Run(root / f"20260101-000000-r{i:05d}")
        (run.path / "checkpoints").mkdir(parents=True)
        run.write_config({"name": f"r{i}", "model": {"name": "residual_mlp", "depth": 4}})
        run.write_status("completed", "done", step=10, total_steps=10)
        run.append_metrics({"kind": "step", "step": 10, "loss": 0.1})


class PeakMemory:
    """The resident memory of this process, sampled every 50 ms in a thread: its peak since :meth:`start`."""

    def __init__(self) -> None:
        self.proc, self.peak, self._stop = psutil.Process(), 0, threading.Event()

    def start(self) -> PeakMemory:
        self.base = self.peak = self.proc.memory_info().rss
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


def first_row(browser, url: str, errors: list[str]):
    """Session A opens the Runs page; returns it and the seconds until its table showed a row."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.on("pageerror", lambda e: errors.append(str(e)))
    t0 = time.perf_counter()
    page.goto(f"{url}/apps?page=Runs", timeout=120_000)
    page.locator(".tabulator-row").first.wait_for(timeout=120_000)
    return page, time.perf_counter() - t0


def open_runs(page, url: str, ids: dict[str, str]) -> float:
    """Session A opens each hostile run; returns the seconds until the big run's curves and the refusals were
    shown."""
    t0 = time.perf_counter()
    page.goto(f"{url}/apps?page=Runs&run={ids['tiles']}", timeout=120_000)
    page.wait_for_function(JS_TEXT, arg="is not drawn", timeout=120_000)
    page.goto(f"{url}/apps?page=Runs&run={ids['deep']}", timeout=120_000)
    page.wait_for_function(JS_TEXT, arg="nests deeper", timeout=120_000)
    page.goto(f"{url}/apps?page=Runs&compare={ids['wide-a']},{ids['wide-b']}", timeout=120_000)
    page.wait_for_function(JS_TEXT, arg="No config could be read", timeout=120_000)
    page.goto(f"{url}/apps?page=Runs&run={ids['big']}", timeout=120_000)
    page.wait_for_function(JS_TEXT, arg="Loss", timeout=300_000)
    page.goto(f"{url}/apps?page=Runs&run={ids['bomb']}", timeout=120_000)
    page.get_by_text("expands").first.wait_for(timeout=120_000)
    page.goto(f"{url}/apps?page=Runs&run={ids['picture']}", timeout=120_000)
    page.get_by_text("not shown").first.wait_for(timeout=120_000)
    page.goto(f"{url}/apps?page=Runs&run={ids['big']}", timeout=120_000)  # the big run again, left open
    return time.perf_counter() - t0


def bomb_files(root: Path) -> dict[str, str]:
    """Write the weights bombs into the runs folder ``root``; returns their names."""
    import torch

    small = root / "small.pt"
    torch.save({"w": torch.zeros(4)}, small)
    bomb = root / "deflated.pt"  # torch.save's zip with its one tensor entry deflated and declared 2 GB
    with zipfile.ZipFile(small) as zin, zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.endswith("/data/0"):
                with zout.open(info.filename, "w", force_zip64=True) as member:
                    for _ in range(2048):
                        member.write(bytes(1 << 20))
            else:
                zout.writestr(info.filename, zin.read(info.filename))
    small.unlink()
    header = json.dumps({f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                         for i in range(1_000_000)}).encode()
    (root / "many.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return {"deflated": bomb.name, "many": "many.safetensors"}


def open_hostile_inputs(browser, url: str, bombs: dict[str, str], errors: list[str]) -> tuple[float, float, list]:
    """Open every hostile page input, each in its own session, and leave them open; returns the seconds until the
    URL-sized Alignment page first painted and until its preview arrived, and the pages."""
    pages = []

    def new() -> object:
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.on("pageerror", lambda e: errors.append(str(e)))
        pages.append(page)
        return page

    sized = new()
    t0 = time.perf_counter()
    sized.goto(f"{url}/apps?page=Alignment&width=1024&depth=32&inputs=512&k=64", timeout=120_000)
    sized.get_by_text(SIDEBAR).first.wait_for(timeout=120_000)
    painted = time.perf_counter() - t0
    new().goto(f"{url}/apps?page=Alignment&data_folder={'a/' * 20_000}", timeout=120_000)
    for weights, blocks in ((bombs["deflated"], ""), (bombs["many"], ""), (bombs["deflated"], "[" * 4000)):
        page = new()
        page.goto(f"{url}/apps?page=Alignment", timeout=120_000)
        page.get_by_text("Analyse a checkpoint").click()
        for placeholder, value in (("timm:resnet18", "torchvision:resnet18"), ("resnet18.safetensors", weights),
                                   ("(found for ResNets and ViTs)", blocks)):
            if value:
                page.get_by_placeholder(placeholder).fill(value)
                page.get_by_placeholder(placeholder).press("Enter")
        page.get_by_role("button", name="Analyse", exact=True).click()
    sized.wait_for_function(JS_TEXT, arg="Preview of the untrained networks: done", timeout=300_000)
    return painted, time.perf_counter() - t0, pages


def first_paints(browser, url: str, opens: int, errors: list[str]) -> dict[tuple[str, str], list[float]]:
    """Open each page of :data:`PAINTED` ``opens`` times; returns ``(page, what) → seconds`` of each open: ``answer``
    (the document request over HTTP: the session made, its document built), ``sidebar`` (the browser, from ``goto``
    to the sidebar's text visible) and, for the Alignment page, ``figures`` (all in the page) and ``preview`` (the
    untrained networks drawn, which each open waits for before the next)."""
    out: dict[tuple[str, str], list[float]] = {}
    for _ in range(opens):
        for name in PAINTED:
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"{url}/apps?page={name}", timeout=120) as response:
                response.read()
            out.setdefault((name, "answer"), []).append(time.perf_counter() - t0)
    for _ in range(opens):
        for name in PAINTED:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.on("pageerror", lambda e: errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto(f"{url}/apps?page={name}", timeout=120_000)
            page.get_by_text(SIDEBAR).first.wait_for(timeout=120_000)
            out.setdefault((name, "sidebar"), []).append(time.perf_counter() - t0)
            if name == "Alignment":
                page.wait_for_function(JS_FIGURES, arg=ALIGNMENT_FIGURES, polling=50, timeout=120_000)
                out.setdefault((name, "figures"), []).append(time.perf_counter() - t0)
                page.wait_for_function(JS_TEXT, arg="Preview of the untrained networks: done", timeout=300_000)
                out.setdefault((name, "preview"), []).append(time.perf_counter() - t0)
            page.close()
    return out


def paint_table(times: dict[tuple[str, str], list[float]]) -> str:
    """The first paints as a table: median and max seconds of each measure."""
    return table(["page", "measured", "opens", "median s", "max s"],
                 [[name, what, len(v), f"{median(v):.2f}", f"{max(v):.2f}"] for (name, what), v in times.items()])


def paint_verdict(times: dict[tuple[str, str], list[float]]) -> str:
    """The first paints' targets, each PASS or FAIL."""
    answer = median(times[("Alignment", "answer")])
    ratio = median(times[("Alignment", "sidebar")]) / median(times[("Playground", "sidebar")])
    return (f"Alignment page's answer <= {ANSWER_S:g} s (median): {'PASS' if answer <= ANSWER_S else 'FAIL'}; its "
            f"first paint <= {PAINT_RATIO:g} x the Playground's (median, {ratio:.2f}): "
            f"{'PASS' if ratio <= PAINT_RATIO else 'FAIL'}")


def only_first_paint(opens: int) -> int:
    """``--first-paint-only``: the first paints on a server of one run, printed with their targets."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    ordinary(root, 1)
    with serving_lab(root, max_jobs=2) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        first_paints(browser, url, 1, errors)  # the server's first sessions and the browser's cache, not measured
        times = first_paints(browser, url, opens, errors)
        browser.close()
    shutil.rmtree(root, ignore_errors=True)
    print(f"First paint of the Alignment page and the Playground, {opens} opens each; {os.cpu_count()} CPUs")
    print(paint_table(times))
    print(f"targets: {paint_verdict(times)}")
    for error in dict.fromkeys(e.splitlines()[0] for e in errors):
        print(f"browser error: {error}")
    return 0


def scan_cost(root: Path) -> tuple[float, float]:
    """Seconds of the first listing of ``root`` and of a listing of the same, unchanged folders."""
    catalog = RunCatalog()
    t0 = time.perf_counter()
    catalog.summaries([root])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    catalog.summaries([root])
    return first, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000, help="ordinary runs beside the hostile ones")
    parser.add_argument("--metrics-mb", type=int, default=197, help="size of the big metrics.jsonl")
    parser.add_argument("--presses", type=int, default=30, help="slider changes measured per condition")
    parser.add_argument("--opens", type=int, default=5, help="opens of each page whose first paint is measured")
    parser.add_argument("--first-paint-only", action="store_true", help="measure only the pages' first paints")
    args = parser.parse_args(argv)
    if args.first_paint_only:
        return only_first_paint(args.opens)
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    t_bench = time.perf_counter()
    clean, hostile = Path(tempfile.mkdtemp(prefix="lab-bench-")), Path(tempfile.mkdtemp(prefix="lab-bench-"))
    ids = hostile_folder(hostile, args.runs, args.metrics_mb)
    ordinary(clean, 1)  # the reference's Runs page shows one row
    inputs = Path(tempfile.mkdtemp(prefix="lab-bench-"))
    ordinary(inputs, 1)
    bombs = bomb_files(inputs)
    rows = []
    reference = None
    painted = arrived = paints = None
    for name, root in (("one run (reference)", clean), ("hostile runs folder", hostile),
                       ("hostile page inputs", inputs)):
        errors_before = len(errors)
        with serving_lab(root, max_jobs=2) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            memory = PeakMemory().start()
            runs_page, cold = first_row(browser, url, errors)  # the server's first page
            runs_page.close()
            runs_page, row = first_row(browser, url, errors)  # a page opened on a server that serves already
            if root is clean:
                paints = first_paints(browser, url, args.opens, errors)
            opened = open_runs(runs_page, url, ids) if root is hostile else None
            if root is inputs:
                painted, arrived, _ = open_hostile_inputs(browser, url, bombs, errors)
            t0 = time.perf_counter()
            measured = open_page(browser, url, MEASURED, errors)
            load = time.perf_counter() - t0
            ms = slider_latencies(measured, args.presses, 0.25, 60.0)
            memory.stop()
            browser.close()
        p95 = float(np.percentile(ms, 95))
        reference = reference or p95
        rows.append([name, f"{load:.2f}", len(ms), median(ms), p95, p95 / reference,
                     f"{(memory.peak - memory.base) / 1e9:.2f}", f"{memory.peak / 1e9:.2f}",
                     f"{cold:.2f}", f"{row:.2f}", "—" if opened is None else f"{opened:.1f}",
                     len(errors) - errors_before])
    first, again = scan_cost(hostile)
    for folder in (clean, hostile, inputs):
        shutil.rmtree(folder, ignore_errors=True)
    print(f"A second session's Playground beside a Runs page on a hostile runs folder ({args.runs} runs, a "
          f"{args.metrics_mb} MB metrics file, a named pipe, a 512 MB snapshot bomb, a 150 MB picture, 2,048 tiles per "
          "layer, a config 900 levels deep, two of 20,000 keys); "
          f"{os.cpu_count()} CPUs; bench took {time.perf_counter() - t_bench:.0f} s")
    print(table(["condition", "page load s", "changes", "median ms", "p95 ms", "p95 / reference",
                 "peak memory added GB", "peak RSS GB", "Runs first row s, first page", "again s",
                 "hostile runs opened s", "browser errors"], rows))
    worst = max(r[4] for r in rows)
    peak = max(float(r[7]) for r in rows)
    row = max(float(r[9]) for r in rows)
    print(f"URL-sized Alignment page (lowered to a link's limits): first paint {painted:.2f} s, preview arrived "
          f"{arrived:.1f} s")
    print(f"First paint of the Alignment page and the Playground on the reference's server, {args.opens} opens each")
    print(paint_table(paints))
    print(f"targets: p95 <= {ANSWER_MS:.0f} ms: {'PASS' if worst <= ANSWER_MS else 'FAIL'}; peak RSS < "
          f"{MEMORY_GB} GB: {'PASS' if peak < MEMORY_GB else 'FAIL'}; Runs page's first row on a serving server "
          f"<= {FIRST_ROW_S:g} s: {'PASS' if row <= FIRST_ROW_S else 'FAIL'}; Alignment page's first paint <= "
          f"{FIRST_PAINT_S:g} s: {'PASS' if painted <= FIRST_PAINT_S else 'FAIL'}; {paint_verdict(paints)}")
    print(table(["listing", "runs", "seconds"], [["first scan", args.runs + len(ids), first],
                                                  ["unchanged folders again", args.runs + len(ids), again]]))
    for error in dict.fromkeys(e.splitlines()[0] for e in errors):
        print(f"browser error: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
