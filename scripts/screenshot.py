"""Make the README's pictures of the lab's pages from real runs.

Serves the lab's app on a free port of 127.0.0.1 with a temporary runs folder and drives Debian's Chromium
(Playwright). The Playground (with the settings of ``--query``) trains for ``--seconds`` and pauses; its picture shows
the sidebar's controls and status, the grid, the decision map, the α chart and the curves. With ``--pages`` more
pages follow, in the same server: Alignment, Rank and Diffusion each train for ``--seconds`` and pause; Data trains
its default model; Runs opens the Playground's run; Checkpoint trains a timm ResNet-18 on the digits with ``lab
train``, writes its weights as a safetensors file into the server's runs folder, and analyses that file through the
Alignment page's "Analyse a checkpoint" card (``alignment-checkpoint.png``). Each picture is written to
``OUT/<page>.png`` (the Playground's to ``--out``). Prints, per page, the status line it was taken at.

    python scripts/screenshot.py [--seconds 25] [--query "depth=12&width=12"] [--out docs/playground.png]
    python scripts/screenshot.py --pages Alignment,Rank,Diffusion,Data,Runs,Checkpoint --pictures docs/pages
"""

from __future__ import annotations

import argparse
import html
import io
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from lab.ui.serve import serving_lab  # noqa: E402

QUERY = "depth=12&width=12&shortcut=linear&alpha_min=0.5"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

# The grid's title ("step N") and the job's status line, read from the page's Bokeh models.
JS_TITLE = """() => { let last = null; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.pixels !== undefined && m.title.startsWith('step ')) last = m.title; return last; }"""
JS_STATUS = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.css_classes && m.css_classes.includes('lab-status')) return m.text;
    return null; }"""
JS_HAS_TEXT = """(needle) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(needle)) return true; return false; }"""
JS_CURVE_POINTS = """() => { let n = 0; for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (m.name === "accuracy:test_acc") n = m.get_length(); return n; }"""


def plain(text: str | None) -> str:
    """The status line without its Markdown/HTML markup."""
    return re.sub(r"<[^>]+>|[*`]", "", html.unescape(text or "")).strip()


def save_png(png: bytes, out: Path, max_bytes: int) -> int:
    """Write ``png`` to ``out``, quantised to a palette when that keeps it under ``max_bytes``; returns the size."""
    from PIL import Image

    out.parent.mkdir(parents=True, exist_ok=True)
    data = png
    if len(data) > max_bytes:
        image = Image.open(io.BytesIO(png)).convert("RGB")
        for colours in (256, 128, 64):
            buffer = io.BytesIO()
            image.quantize(colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
                buffer, format="PNG", optimize=True)
            data = buffer.getvalue()
            if len(data) <= max_bytes:
                break
    out.write_bytes(data)
    return len(data)


PAGES = ("Alignment", "Rank", "Diffusion", "Data", "Runs", "Checkpoint")
FILES = {"Checkpoint": "alignment-checkpoint.png"}
"""A page's picture's file name, where it is not ``<page>.png``."""
"""The pages ``--pages`` may name, besides the Playground (always first: the Runs page opens its run)."""


def _clip(page, width: int, height: int) -> dict[str, float]:
    """The page's sidebar and main area (no empty margin right of it)."""
    main_area = page.locator("#main").bounding_box() or {"x": 0, "width": width}
    return {"x": 0, "y": 0, "width": min(width, main_area["x"] + main_area["width"]), "height": height}


def _status(page) -> str:
    return plain(page.evaluate(JS_STATUS))


def _train_and_pause(page, seconds: float, until_gone: str | None = None) -> None:
    """Press Start / pause, let the run train ``seconds`` once its status says it runs (and until no text
    ``until_gone`` is left on the page: the first evaluation's views), pause and wait for it."""
    page.get_by_role("button", name="Start / pause").click()
    page.wait_for_function(f"() => {{ const s = ({JS_STATUS})(); return s && /step [1-9]/.test(s); }}",
                           timeout=300_000)
    time.sleep(seconds)
    deadline = time.monotonic() + 600
    while until_gone is not None and page.get_by_text(until_gone).count() and time.monotonic() < deadline:
        time.sleep(2.0)
    page.get_by_role("button", name="Start / pause").click()
    page.wait_for_function(f"() => {{ const s = ({JS_STATUS})(); return s && s.includes('paused'); }}",
                           timeout=300_000)


def _checkpoint(page, url: str, runs: Path) -> None:
    """Train a timm ResNet-18 on the digits, save its weights (timm's keys) into the runs folder and analyse that file
    on the Alignment page's checkpoint card."""
    import torch
    from safetensors.torch import save_file

    from lab.cli import main as lab

    folder = runs / "trained"
    if lab(["train", "ra_fc_digits", "model.name=timm_resnet18", "data.image_size=16", "train.epochs=10",
            "train.lr=0.05", "--runs-dir", str(folder), "--no-progress"]):
        raise RuntimeError("training the ResNet-18 failed")
    (trained,) = folder.iterdir()
    state = torch.load(trained / "checkpoints" / "last.pt", weights_only=True)["model"]
    save_file({k.removeprefix("model."): v.contiguous() for k, v in state.items()}, str(runs / "resnet18.safetensors"))
    page.goto(f"{url}/apps?page=Alignment", timeout=120_000)
    page.wait_for_function(f"() => ({JS_STATUS})() !== null", timeout=120_000)
    page.get_by_text("Analyse a checkpoint").click()
    for placeholder, value in (("timm:resnet18", "timm:resnet18"), ("resnet18.safetensors", "resnet18.safetensors"),
                               ("data.image_size=32", "data.image_size=16")):
        page.get_by_placeholder(placeholder).fill(value)
        page.get_by_placeholder(placeholder).press("Enter")
    page.get_by_role("button", name="Analyse", exact=True).click()
    page.wait_for_function(JS_HAS_TEXT, arg="checkpoint timm:resnet18", timeout=900_000)


def _other_page(page, url: str, name: str, seconds: float, run_id: str, runs: Path) -> None:
    """Bring page ``name`` to the state its picture shows."""
    if name == "Checkpoint":
        _checkpoint(page, url, runs)
        time.sleep(2.0)
        return
    query = f"&run={run_id}" if name == "Runs" else ""
    page.goto(f"{url}/apps?page={name}{query}", timeout=120_000)
    page.wait_for_function(f"() => ({JS_STATUS})() !== null || document.querySelector('.tabulator') !== null",
                           timeout=120_000)
    if name == "Runs":
        page.locator(".tabulator-cell", has_text=run_id).first.wait_for(timeout=120_000)
        time.sleep(5.0)  # the opened run's curves and saved snapshots arrive with the next scans
    elif name == "Data":
        page.get_by_role("button", name="Train the default model").click()
        page.wait_for_function(f"() => {{ const s = ({JS_STATUS})(); return s && s.includes('completed'); }}",
                               timeout=300_000)
    else:  # the Diffusion page's first evaluation (samples, digits-FD, probes) comes after a few hundred steps
        _train_and_pause(page, seconds, until_gone="no samples yet" if name == "Diffusion" else None)
    time.sleep(2.0)  # let the canvases repaint


def main(argv: list[str] | None = None) -> int:
    """Serve the app, train the Playground (and the other ``--pages``) for a while in Chromium and save the pictures.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 when every picture was saved.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="seconds to train before pausing")
    parser.add_argument("--query", default=QUERY, help="Playground settings as a URL query (overrides the default)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "playground.png", help="PNG to write")
    parser.add_argument("--pages", default="", help=f"more pages, comma-separated: {', '.join(PAGES)}")
    parser.add_argument("--pictures", type=Path, default=ROOT / "docs" / "pages",
                        help="folder of the other pages' pictures (<page>.png)")
    parser.add_argument("--width", type=int, default=1500, help="browser viewport width")
    parser.add_argument("--height", type=int, default=1100, help="browser viewport height")
    parser.add_argument("--max-kb", type=int, default=400, help="quantise a PNG when it is larger than this")
    args = parser.parse_args(argv)
    pages = [p.strip() for p in args.pages.split(",") if p.strip()]
    unknown = [p for p in pages if p not in PAGES]
    if unknown:
        parser.error(f"unknown pages {unknown}; choose among {', '.join(PAGES)}")

    from playwright.sync_api import sync_playwright

    runs = Path(tempfile.mkdtemp(prefix="lab-screenshot-"))
    query = args.query.lstrip("?&")
    pictures: dict[str, tuple[bytes, dict[str, float], str]] = {}
    try:
        with serving_lab(runs, max_jobs=1) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url}/apps?page=Playground&{query}", timeout=120_000)
            page.wait_for_function(f"() => ({JS_TITLE})() !== null", timeout=120_000)
            page.get_by_role("button", name="Start / pause").click()
            page.wait_for_function(f"() => {{ const t = ({JS_TITLE})(); return t && t !== 'step 0'; }}",
                                   timeout=120_000)
            time.sleep(args.seconds)
            # at least two evaluations on the curves before pausing (a slow machine may need longer)
            page.wait_for_function(f"() => ({JS_CURVE_POINTS})() >= 2", timeout=120_000)
            page.get_by_role("button", name="Start / pause").click()
            page.wait_for_function(f"() => {{ const s = ({JS_STATUS})(); return s && s.includes('paused'); }}",
                                   timeout=60_000)
            status = _status(page)
            step = int(re.search(r"step (\d+)", status).group(1))
            # the paused snapshot is the paused model: wait until the grid shows it
            page.wait_for_function(f"(s) => ({JS_TITLE})() === 'step ' + s", arg=step, timeout=60_000)
            time.sleep(1.0)  # let the canvases repaint
            clip = _clip(page, args.width, args.height)
            pictures["Playground"] = (page.screenshot(clip=clip), clip, status)
            run_id = next(runs.iterdir()).name
            for name in pages:
                _other_page(page, url, name, args.seconds, run_id, runs)
                clip = _clip(page, args.width, args.height)
                pictures[name] = (page.screenshot(clip=clip), clip, _status(page))
            browser.close()
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    for name, (png, clip, status) in pictures.items():
        out = args.out if name == "Playground" else args.pictures / FILES.get(name, f"{name.lower()}.png")
        size = save_png(png, out, args.max_kb * 1024)
        print(f"{name}: saved {out} ({clip['width']:.0f} x {clip['height']:.0f} px, {size / 1024:.0f} KB); "
              f"status: {status}")
    acc = re.search(r"test acc ([0-9.]+)", pictures["Playground"][2])
    print(f"Playground settings: {query}; trained {step} steps in about {args.seconds:.0f} s; test accuracy "
          f"{acc.group(1) if acc else 'n/a'}")
    if errors:
        print("browser console errors:", *errors, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
