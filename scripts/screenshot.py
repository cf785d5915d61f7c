"""Make the README's picture of the Playground from a real run.

Serves the lab's app on a free port of 127.0.0.1 with a temporary runs folder, opens the Playground in Debian's
Chromium (Playwright) with the settings of ``--query``, presses "Start / pause", trains for ``--seconds``, pauses,
and saves the page (the sidebar's controls and status, the grid, the decision map, the α chart and the curves) as a
PNG. Prints the steps trained and the test accuracy the status line shows.

    python scripts/screenshot.py [--seconds 25] [--query "depth=12&width=12"] [--out docs/playground.png]
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
    if (typeof m.text === 'string' && m.text.startsWith('step ')) last = m.text; return last; }"""
JS_STATUS = """() => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.css_classes && m.css_classes.includes('lab-status')) return m.text;
    return null; }"""
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


def main(argv: list[str] | None = None) -> int:
    """Serve the app, train the Playground for a while in Chromium and save the screenshot.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 when the picture was saved.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="seconds to train before pausing")
    parser.add_argument("--query", default=QUERY, help="Playground settings as a URL query (overrides the default)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "playground.png", help="PNG to write")
    parser.add_argument("--width", type=int, default=1500, help="browser viewport width")
    parser.add_argument("--height", type=int, default=1100, help="browser viewport height")
    parser.add_argument("--max-kb", type=int, default=400, help="quantise the PNG when it is larger than this")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    runs = Path(tempfile.mkdtemp(prefix="lab-screenshot-"))
    query = args.query.lstrip("?&")
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
            status = plain(page.evaluate(JS_STATUS))
            step = int(re.search(r"step (\d+)", status).group(1))
            # the paused frame is the paused model: wait until the grid shows it
            page.wait_for_function(f"(s) => ({JS_TITLE})() === 'step ' + s", arg=step, timeout=60_000)
            time.sleep(1.0)  # let the canvases repaint
            main_area = page.locator("#main").bounding_box() or {"x": 0, "width": args.width}
            clip = {"x": 0, "y": 0, "width": min(args.width, main_area["x"] + main_area["width"]),
                    "height": args.height}
            png = page.screenshot(clip=clip)
            browser.close()
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    size = save_png(png, args.out, args.max_kb * 1024)
    acc = re.search(r"test acc ([0-9.]+)", status)
    print(f"settings: {query}")
    print(f"trained {step} steps in about {args.seconds:.0f} s; test accuracy {acc.group(1) if acc else 'n/a'}")
    print(f"status line: {status}")
    print(f"saved {args.out} ({clip['width']:.0f} x {clip['height']:.0f} px, {size / 1024:.0f} KB)")
    if errors:
        print("browser console errors:", *errors, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
