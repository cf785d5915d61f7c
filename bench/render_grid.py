"""Server-side cost of one TFMeter frame (32 layers × 32 nodes): build, render to Bokeh, serialise; wire size.

Run: ``python bench/render_grid.py [--quick] [--repeats N]``. Prints one table; ratios are against a reference
measured in the same run (a plain ``hv.Image`` with as many pixels as the mosaic, full frame, server protocol).

Paths measured (median of N):
- full frame, embed: ``node_grid`` + ``hv.render`` + ``bokeh.embed.json_item`` (buffers gzip'd, base64 in JSON).
- full frame, server: the same figure as a Bokeh server sends a new document (JSON + raw binary buffers).
- live update: the figure already on the page (``DynamicMap`` fed by a ``Pipe``); one ``pipe.send(snapshot)``
  rebuilds the element and updates the data sources in place, then the ``PATCH-DOC`` message is serialised.
- arrays only: ``mosaic`` (tiles and rasterised weight lines) + ``hover_boxes`` assigned to existing Bokeh
  sources, then the ``PATCH-DOC`` message serialised: the floor for a page that updates its own sources.
- reference image: ``hv.Image`` of the mosaic's pixel count, full frame, server protocol.
- naive 6×6: one figure per node (``hv.Layout`` of 36 images), server protocol, scaled ×(33·32 / 36).

Browser frame rate and training throughput with the page open are measured elsewhere, once the page exists.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import holoviews as hv
import numpy as np
from bokeh.core.json_encoder import serialize_json
from bokeh.document import Document
from bokeh.embed import json_item
from bokeh.models import ColumnDataSource
from bokeh.protocol import Protocol

import lab
from lab.data.toy2d import spiral
from lab.snapshots.builders import nodes_snapshot
from lab.viz.node_grid import hover_boxes, mosaic, node_grid

TARGET_MS, TARGET_MB = 50.0, 4.0


def median_ms(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    out, times = fn(), []  # one warm-up call (first-use imports, caches)
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), out


def server_bytes(fig) -> int:
    """Bytes of a document holding ``fig`` as the server sends it: JSON text plus raw binary buffers."""
    doc = Document()
    doc.add_root(fig)
    ser = doc.to_json(deferred=True)
    return len(serialize_json(ser.content).encode()) + sum(len(b.to_bytes()) for b in ser.buffers)


def embed_bytes(fig) -> int:
    return len(json.dumps(json_item(fig)).encode())


def full_frame(build: Callable[[], hv.Element], serialise: Callable[[object], int], repeats: int) -> dict:
    t_build, el = median_ms(build, repeats)
    t_render, _ = median_ms(lambda: hv.render(el, backend="bokeh"), repeats)
    figs = iter([hv.render(el, backend="bokeh") for _ in range(repeats + 1)])  # a fresh model per serialisation
    t_ser, size = median_ms(lambda: serialise(next(figs)), repeats)
    return {"build": t_build, "render": t_render, "serialise": t_ser, "bytes": size}


def live_update(snapshots: list[dict], points, repeats: int) -> dict:
    pipe = hv.streams.Pipe(data=snapshots[0])
    dmap = hv.DynamicMap(lambda data: node_grid(data, points=points), streams=[pipe])
    doc = Document()
    plot = hv.renderer("bokeh").get_plot(dmap, doc=doc)
    doc.add_root(plot.state)
    events: list = []
    doc.on_change(lambda event: events.append(event))
    state = {"i": 0}

    def send() -> None:
        events.clear()
        state["i"] += 1
        pipe.send(snapshots[state["i"] % len(snapshots)])

    t_update, _ = median_ms(send, repeats)
    sizes = []

    def patch() -> int:
        msg = Protocol().create("PATCH-DOC", list(events))
        size = len(msg.header_json) + len(msg.metadata_json) + len(msg.content_json)
        sizes.append(size + sum(len(b.to_bytes()) for b in msg.buffers))
        return sizes[-1]

    send()
    t_ser, size = median_ms(patch, 1)
    return {"build": float("nan"), "render": t_update, "serialise": t_ser, "bytes": size}


def arrays_only(snapshots: list[dict], repeats: int) -> dict:
    doc = Document()
    sources = [ColumnDataSource() for _ in range(2)]
    for src in sources:
        doc.add_root(src)
    events: list = []
    doc.on_change(lambda event: events.append(event))
    state = {"i": 0}

    def update() -> int:
        events.clear()
        state["i"] += 1
        snapshot = snapshots[state["i"] % len(snapshots)]
        m = mosaic(snapshot)
        sources[0].data = {"image": [m.index]}
        sources[1].data = hover_boxes(m, float(snapshot["limit"]), snapshot["decision"])
        msg = Protocol().create("PATCH-DOC", list(events))
        size = len(msg.header_json) + len(msg.metadata_json) + len(msg.content_json)
        return size + sum(len(b.to_bytes()) for b in msg.buffers)

    t_total, size = median_ms(update, repeats)
    return {"build": t_total, "render": float("nan"), "serialise": float("nan"), "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)

    model = lab.create_model("residual_mlp", seed=0)
    snapshot = nodes_snapshot(model)
    snapshot["step"] = np.int64(0)
    other = {**snapshot, "maps": snapshot["maps"] * np.float32(1.01), "step": np.int64(1)}
    x, y = spiral(16384)
    points = (x.numpy(), y.numpy())
    mos = mosaic(snapshot)
    depth, width = snapshot["maps"].shape[:2]

    def grid() -> hv.Overlay:
        return node_grid(snapshot, points=points)

    def ref_image() -> hv.Image:
        return hv.Image(np.random.default_rng(0).random(mos.index.shape, np.float32))

    small = {**snapshot, "maps": snapshot["maps"][:6, :6]}

    def naive() -> hv.Layout:
        return hv.Layout([hv.Image(small["maps"][layer, node]).opts(width=60, height=60, xaxis=None, yaxis=None)
                          for layer in range(6) for node in range(6)]).cols(6)

    scale = depth * width / 36
    rows = {
        "full frame, embed (json_item)": full_frame(grid, embed_bytes, repeats),
        "full frame, server protocol": full_frame(grid, server_bytes, repeats),
        "live update (Pipe, PATCH-DOC)": live_update([snapshot, other], points, repeats),
        "arrays only (own sources, PATCH-DOC)": arrays_only([snapshot, other], repeats),
        "reference: hv.Image, same pixels": full_frame(ref_image, server_bytes, repeats),
    }
    nv = full_frame(naive, server_bytes, min(repeats, 2))  # 36 figures: seconds per render
    rows[f"naive 6x6 figures (x{scale:.1f})"] = {k: v * scale for k, v in nv.items()}
    ref = rows["reference: hv.Image, same pixels"]
    ref_total = ref["build"] + ref["render"] + ref["serialise"]

    print(f"TFMeter frame: {depth} layers x {width} nodes, mosaic {mos.index.shape[1]}x{mos.index.shape[0]} px "
          f"(tile {mos.tile} px), median of {repeats}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    head = (f"{'path':38} {'build ms':>9} {'render ms':>10} {'serial ms':>10} {'total ms':>9} {'<=50ms':>7} "
            f"{'wire MB':>8} {'<=4MB':>6} {'x ref':>6}")
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        total = np.nansum([r["build"], r["render"], r["serialise"]])
        mb = r["bytes"] / 1e6
        fmt = lambda v: "-" if np.isnan(v) else f"{v:.1f}"  # noqa: E731
        print(f"{name:38} {fmt(r['build']):>9} {fmt(r['render']):>10} {fmt(r['serialise']):>10} {total:9.1f} "
              f"{'pass' if total <= TARGET_MS else 'FAIL':>7} {mb:8.2f} {'pass' if mb <= TARGET_MB else 'FAIL':>6} "
              f"{total / ref_total:6.2f}")
    print("live update: 'render ms' is one pipe.send (node_grid + HoloViews updating the existing figure's sources).")
    print("arrays only: 'build ms' is mosaic + lines + boxes + source assignment + PATCH-DOC, all together.")


if __name__ == "__main__":
    main()
