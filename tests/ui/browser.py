"""Debian's Chromium driven by Playwright, for the browser tests: console and page errors and every request that
would leave the machine are recorded; and the JavaScript that reads a page's Bokeh documents."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


@dataclass
class Seen:
    """What the browser reported while a test drove it."""

    errors: list[str] = field(default_factory=list)  # console errors and uncaught page errors
    external: list[str] = field(default_factory=list)  # requests to any host but this machine


@contextlib.contextmanager
def browser_page(width: int = 1500, height: int = 1100) -> Iterator[tuple[object, Seen]]:
    """A Chromium page and what it reported; requests to other hosts are recorded *and* aborted, so a page
    that needs the network fails here as it would on an air-gapped machine."""
    from playwright.sync_api import sync_playwright

    seen = Seen()

    def route(r) -> None:
        url = r.request.url
        if url.startswith(("data:", "blob:", "about:")) or urlparse(url).hostname in LOCAL_HOSTS:
            r.continue_()
        else:
            seen.external.append(url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.route("**/*", route)
        page.on("console", lambda m: seen.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: seen.errors.append(str(e)))
        try:
            yield page, seen
        finally:
            browser.close()


JS_HAS_TEXT = """(needle) => { for (const doc of Bokeh.documents) for (const m of doc.all_models)
    if (typeof m.text === 'string' && m.text.includes(needle) || m.pixels !== undefined && m.title.includes(needle))
      return true; return false; }"""

# Every plot of every Bokeh document: its title, x/y ranges and the extent of the data its visible glyphs draw.
JS_PLOTS = """() => {
  const X = ["x", "x0", "x1", "left", "right", "xs"], Y = ["y", "y0", "y1", "top", "bottom", "ys"];
  const values = (g, src, name) => {
    const p = g.properties[name]; if (!p) return [];
    const spec = p.get_value(); if (spec == null) return [];
    if (typeof spec === "number") return [spec];
    if (spec.value !== undefined) return typeof spec.value === "number" ? [spec.value] : [];
    const col = src.data[spec.field]; if (!col) return [];
    if (name === "xs" || name === "ys") return Array.from(col).flatMap(line => Array.from(line, Number));
    return Array.from(col, Number);
  };
  const extent = (arr) => { let lo = Infinity, hi = -Infinity, n = 0;
    for (const v of arr) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); n++; }
    return {lo, hi, n}; };
  const out = [];
  for (const doc of Bokeh.documents) for (const m of doc.all_models) {
    if (m.renderers === undefined || m.x_range === undefined || m.y_range === undefined) continue;
    let xs = [], ys = [], points = 0;
    for (const r of m.renderers) {
      if (!r.glyph || !r.data_source || !r.visible) continue;
      const g = r.glyph, src = r.data_source;
      let gx = [], gy = [];
      for (const n of X) gx = gx.concat(values(g, src, n));
      for (const n of Y) gy = gy.concat(values(g, src, n));
      if (g.type === "Image" || g.type === "ImageRGBA") {
        const x = values(g, src, "x"), y = values(g, src, "y"), dw = values(g, src, "dw"), dh = values(g, src, "dh");
        gx = gx.concat(x.map((v, i) => v + dw[i])); gy = gy.concat(y.map((v, i) => v + dh[i]));
      }
      points += src.get_length() || 0;
      xs = xs.concat(gx); ys = ys.concat(gy);
    }
    const ylog = m.y_scale && m.y_scale.type === "LogScale";
    const text = m.title ? m.title.text : "";  // a string, or a text model (PlainText: a run folder's name)
    out.push({title: text && typeof text !== "string" ? text.text : text, points,
              x: extent(xs), y: extent(ylog ? ys.filter(v => v > 0) : ys),
              xr: [m.x_range.start, m.x_range.end], yr: [m.y_range.start, m.y_range.end]});
  }
  return out; }"""


def plots_off_their_data(plots: list[dict], rel_tol: float = 0.005) -> list[str]:
    """Why each plot that cannot show its data fails: no data at all, or data outside its ranges."""
    problems = []
    for p in plots:
        name = p["title"] or "untitled plot"
        if p["points"] == 0 or p["x"]["n"] == 0 or p["y"]["n"] == 0:
            problems.append(f"{name}: no data")
            continue
        for axis, rng in (("x", p["xr"]), ("y", p["yr"])):
            lo, hi = min(rng), max(rng)
            tol = rel_tol * (hi - lo)
            if p[axis]["lo"] < lo - tol or p[axis]["hi"] > hi + tol:
                problems.append(f"{name}: {axis} data [{p[axis]['lo']:.4g}, {p[axis]['hi']:.4g}] outside its range "
                                f"[{lo:.4g}, {hi:.4g}]")
    return problems


# What the page's DOM holds, looking inside every (open) shadow root, where Panel renders: the elements matching
# ``selector``, as outer HTML, and the text a reader sees (text nodes outside script and style elements).
JS_DEEP_DOM = """(selector) => {
  const roots = [document], found = [], text = [];
  for (let i = 0; i < roots.length; i++) {
    const root = roots[i];
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) roots.push(el.shadowRoot);
    for (const el of root.querySelectorAll(selector)) found.push(el.outerHTML);
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode())
      if (!(n.parentElement && n.parentElement.closest("script, style"))) text.push(n.data);
  }
  return {found, text: text.join("")}; }"""


# What each plot on screen draws, measured on its pixels: every Bokeh plot view whose element is laid out, exported
# as it paints (so a plot below the fold is measured as well), with its frame's size, the share of frame pixels that
# are neither background (white) nor grid-line grey, its title's width in its own font, and its legends' boxes
# against the canvas (a legend sticking out of its figure is cut). Given an element (``page.evaluate(JS_PIXELS,
# element)``), only the plots inside it: one notebook cell's.
JS_PIXELS = """(scope) => {
  const out = [], measure = document.createElement("canvas").getContext("2d");
  for (const v of Bokeh.index.query(v => v.frame !== undefined && v.canvas_view !== undefined)) {
    if (scope && !scope.contains(v.root.el)) continue;
    const r = v.el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || !v.el.isConnected) continue;  // hidden (the twin's column switched off)
    const f = v.frame.bbox, layer = v.export("png", false), ctx = layer.canvas.getContext("2d");
    const w = Math.floor(f.width), h = Math.floor(f.height);  // inside the axes' lines, which edge the frame:
    const px = w > 8 && h > 8 ? ctx.getImageData(Math.ceil(f.x) + 2, Math.ceil(f.y) + 2, w - 4, h - 4).data : [];
    let coloured = 0;
    for (let i = 0; i < px.length; i += 4) {
      const lo = Math.min(px[i], px[i + 1], px[i + 2]), hi = Math.max(px[i], px[i + 1], px[i + 2]);
      if (px[i + 3] > 0 && (lo < 215 || hi - lo > 24)) coloured++;
    }
    const t = v.model.title;
    let title = "", title_px = 0;
    if (t && t.text) {
      title = typeof t.text === "string" ? t.text : t.text.text;  // a string, or a text model (PlainText)
      measure.font = `${t.text_font_style} ${t.text_font_size} ${t.text_font}`;
      title_px = Math.max(...title.split("\\n").map(line => measure.measureText(line).width));
    }
    const legends = [];
    for (const rv of v.renderer_views.values()) if (rv.model.type === "Legend" && rv.model.visible
        && rv.model.items.length) {
      const b = rv.bbox;
      legends.push({x0: b.x0, y0: b.y0, x1: b.x1, y1: b.y1});
    }
    const glyphs = v.model.renderers.filter(g => g.glyph).map(g => g.glyph.type);
    const corner = px.length ? Array.from(px.slice(0, 3)) : null;  // the frame's top-left pixel (inside the axes)
    out.push({title, title_px, frame: [w, h], canvas: [v.bbox.width, v.bbox.height], legends, glyphs, corner,
              pixels: coloured, coloured: px.length ? coloured / ((w - 4) * (h - 4)) : 0});
  }
  return out; }"""


# Every canvas grid on screen (:class:`lab.ui.views.grid_canvas.GridCanvas`: the node grid, the decision map) measured
# on its canvas: its title, its
# size in mosaic pixels and on screen, the share of its pixels coloured (as :data:`JS_PIXELS` counts them), the
# tooltip's text, and the page coordinates of the centre of each hover box (to point at a tile).
JS_GRID_PIXELS = """(scope) => {
  const out = [];
  for (const v of Bokeh.index.query(v => v.model.data && v.model.data.pixels !== undefined && v.container)) {
    const c = v.container.querySelector(".lab-grid-pixels");
    if (!c || (scope && !scope.contains(v.root.el))) continue;
    const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data, r = c.getBoundingClientRect();
    let coloured = 0;
    for (let i = 0; i < px.length; i += 4) {
      const lo = Math.min(px[i], px[i + 1], px[i + 2]), hi = Math.max(px[i], px[i + 1], px[i + 2]);
      if (px[i + 3] > 0 && (lo < 215 || hi - lo > 24)) coloured++;
    }
    const centres = (v.model.data.layout.boxes || []).map(b => [r.x + (b[0] + b[2]) / 2, r.y + (b[1] + b[3]) / 2]);
    out.push({title: v.container.querySelector(".lab-grid-title").textContent, size: [c.width, c.height],
              shown: [r.width, r.height], coloured: coloured / (c.width * c.height), centres,
              tip: v.container.querySelector(".lab-grid-tip").textContent});
  }
  return out; }"""


def pixel_problems(plots: list[dict], min_width: int = 200, image_share: float = 0.2,
                   min_pixels: int = 15) -> list[str]:
    """Why each measured plot (:data:`JS_PIXELS`) fails to read: a frame narrower than ``min_width``, an image
    that colours less than ``image_share`` of its frame, lines and markers that colour fewer than ``min_pixels``
    (one marker of a single evaluation is about 25), a title wider than its frame, a legend outside its figure."""
    problems = []
    for p in plots:
        name = p["title"] or "untitled plot"
        w, h = p["frame"]
        if w < min_width:
            problems.append(f"{name}: frame {w} x {h} px")
        if "Image" in p["glyphs"] and p["coloured"] < image_share:
            problems.append(f"{name}: {100 * p['coloured']:.1f} % of the frame coloured (wanted "
                            f"{100 * image_share:g} %)")
        elif p["pixels"] < min_pixels:
            problems.append(f"{name}: {p['pixels']} pixels coloured (wanted {min_pixels})")
        if p["title_px"] > w + 1:
            problems.append(f"{name}: title {p['title_px']:.0f} px wide over a {w} px frame")
        cw, ch = p["canvas"]
        for b in p["legends"]:
            if b["x0"] < -1 or b["y0"] < -1 or b["x1"] > cw + 1 or b["y1"] > ch + 1:
                problems.append(f"{name}: legend {b} outside the {cw} x {ch} px figure")
    return problems


def pixel_report(plots: list[dict]) -> str:
    """One line per measured plot: its frame and the share of it coloured (printed by the tests: run with -s)."""
    return "\n".join(f"  {p['title'][:48]:48} frame {p['frame'][0]:>3} x {p['frame'][1]:>3} px, "
                     f"{100 * p['coloured']:5.1f} % coloured ({p['pixels']} px)" for p in plots)
