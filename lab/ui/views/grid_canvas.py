"""The node grid drawn by the browser onto a canvas: the mosaic's palette indices go to the page as bytes, and each
frame costs the page one pass of a 256-entry colour lookup and one ``putImageData``. The Playground's decision map
is drawn the same way (:class:`lab.ui.views.live_grid.LiveDecision`).

A Bokeh figure of the same mosaic spent about 45 ms of the browser's main thread per frame (measured with Chromium's
profiler on the served Playground, 32 × 32 nodes): colour-mapping the image through its colour mapper, then
repainting the whole figure, its 65 tick labels re-measured through computed styles, at every snapshot. Here the
labels, the training points and the axis titles are drawn once per layout on their own canvases; a frame changes the
pixels, the hover ranges and the title only. Hover shows a tile's layer, node and value range as text (a tooltip
set through ``textContent``, never markup). What the figure's toolbar offered instead (zooming in on tiles) the
page's layer and node ranges do; the export and a run's replayed snapshots keep the Bokeh figure
(:func:`lab.viz.node_grid.node_grid`).
"""

from __future__ import annotations

import numpy as np
import param
from panel.custom import JSComponent

from lab.viz.node_grid import LUT
from lab.viz.palette import BLUE, ORANGE


class GridCanvas(JSComponent):
    """A mosaic of palette indices (:class:`lab.viz.node_grid.Mosaic`) with labels, points and hover, on canvases.

    The layout (size, labels, hover boxes, points) changes with the view; the pixels, ranges and title with every
    snapshot. Pixel coordinates throughout are the mosaic's: x to the right, y down from the top, one screen pixel
    per mosaic pixel.
    """

    pixels = param.Array(default=np.full((1, 1), 255, np.uint8),
                         doc="[H_px, W_px] uint8 palette indices, row 0 at the top (255 = transparent)")
    lut = param.Array(default=LUT, constant=True, doc="[256, 4] uint8 RGBA of each palette index")
    ranges = param.Array(default=np.zeros((0, 2), np.float32),
                         doc="[boxes, 2] float32 raw (min, max) of each hover box, in the order of layout['boxes']")
    layout = param.Dict(default={}, doc="per view: 'columns' [[x centre, label]], 'rows' [[y centre, label]], "
                                        "'boxes' [[x0, y0, x1, y1, layer, node]], 'points' [[x, y, class]], "
                                        "'xlabel', 'ylabel'")
    title = param.String(default="", doc="drawn above the grid ('step N')")
    colors = param.List(default=[ORANGE, BLUE], constant=True, doc="fill of class 0 and class 1 points")

    _esm = """
    const LEFT = 44, BOTTOM = 40, FONT = "10px sans-serif";

    export function render({ model, el }) {
      const title = document.createElement("div"), plot = document.createElement("div");
      const axes = document.createElement("canvas"), pixels = document.createElement("canvas");
      const overlay = document.createElement("canvas"), tip = document.createElement("div");
      title.style.cssText = "font: bold 13px sans-serif; height: 18px; padding-left: " + LEFT + "px";
      plot.style.cssText = "position: relative";
      for (const c of [pixels, overlay]) c.style.cssText = "position: absolute; top: 0; left: " + LEFT + "px";
      pixels.style.imageRendering = "pixelated";
      tip.style.cssText = "position: absolute; display: none; pointer-events: none; white-space: pre; " +
        "font: 11px sans-serif; background: white; border: 1px solid #999; padding: 3px 5px";
      title.className = "lab-grid-title"; axes.className = "lab-grid-axes"; pixels.className = "lab-grid-pixels";
      overlay.className = "lab-grid-overlay"; tip.className = "lab-grid-tip";
      plot.append(axes, pixels, overlay, tip);
      el.append(title, plot);
      const lut = new Uint32Array(Uint8Array.from(model.lut).buffer);  // RGBA bytes as one word per index
      const context = pixels.getContext("2d");
      let image = null, hovered = -1;

      const size = () => {
        const [h, w] = model.pixels.shape, ratio = window.devicePixelRatio || 1;
        plot.style.width = (LEFT + w) + "px";
        plot.style.height = (h + BOTTOM) + "px";
        for (const c of [pixels, overlay]) { c.width = w; c.height = h; c.style.width = w + "px"; }
        axes.width = (LEFT + w) * ratio; axes.height = (h + BOTTOM) * ratio;
        axes.style.width = (LEFT + w) + "px"; axes.style.height = (h + BOTTOM) + "px";
        return ratio;
      };
      const drawAxes = () => {
        const ratio = size(), [h, w] = model.pixels.shape, layout = model.layout, c = axes.getContext("2d");
        c.setTransform(ratio, 0, 0, ratio, 0, 0);
        c.clearRect(0, 0, LEFT + w, h + BOTTOM);
        c.font = FONT; c.fillStyle = "#444";
        c.textAlign = "center"; c.textBaseline = "top";
        for (const [x, label] of layout.columns || []) c.fillText(label, LEFT + x, h + 4);
        c.fillText(layout.xlabel || "", LEFT + w / 2, h + 22);
        c.textAlign = "right"; c.textBaseline = "middle";
        for (const [y, label] of layout.rows || []) c.fillText(label, LEFT - 4, y);
        c.save(); c.translate(10, h / 2); c.rotate(-Math.PI / 2); c.textAlign = "center";
        c.fillText(layout.ylabel || "", 0, 0); c.restore();
        drawOverlay();
      };
      const drawOverlay = () => {
        const c = overlay.getContext("2d"), layout = model.layout;
        c.clearRect(0, 0, overlay.width, overlay.height);
        c.lineWidth = 0.5; c.strokeStyle = "white";
        for (const [x, y, cls] of layout.points || []) {
          c.beginPath(); c.arc(x, y, 2, 0, 2 * Math.PI);
          c.fillStyle = model.colors[cls ? 1 : 0]; c.fill(); c.stroke();
        }
        const box = hovered >= 0 ? (layout.boxes || [])[hovered] : null;
        if (box) { c.lineWidth = 1; c.strokeStyle = "black"; c.strokeRect(box[0] + 0.5, box[1] + 0.5,
                                                                            box[2] - box[0] - 1, box[3] - box[1] - 1); }
      };
      const drawPixels = () => {
        const a = model.pixels, [h, w] = a.shape;
        if (pixels.width !== w || pixels.height !== h) drawAxes();
        if (!image || image.width !== w || image.height !== h) image = context.createImageData(w, h);
        const out = new Uint32Array(image.data.buffer);
        for (let i = 0; i < out.length; i++) out[i] = lut[a[i]];
        context.putImageData(image, 0, 0);
      };
      const showTip = () => {
        const box = hovered >= 0 ? (model.layout.boxes || [])[hovered] : null;
        if (!box) { tip.style.display = "none"; return; }
        const r = model.ranges, i = 2 * hovered;
        const range = i + 1 < r.length ? "\\nmin " + r[i].toFixed(3) + "\\nmax " + r[i + 1].toFixed(3) : "";
        tip.textContent = "layer " + box[4] + "\\nnode " + box[5] + range;
        tip.style.left = (LEFT + box[2] + 6) + "px"; tip.style.top = box[1] + "px"; tip.style.display = "block";
      };
      overlay.addEventListener("mousemove", (event) => {
        const x = event.offsetX, y = event.offsetY, boxes = model.layout.boxes || [];
        let found = -1;
        for (let i = 0; i < boxes.length; i++) {
          const b = boxes[i];
          if (x >= b[0] && x < b[2] && y >= b[1] && y < b[3]) { found = i; break; }
        }
        if (found !== hovered) { hovered = found; drawOverlay(); }
        showTip();
      });
      overlay.addEventListener("mouseleave", () => { hovered = -1; drawOverlay(); showTip(); });

      title.textContent = model.title;
      drawAxes();
      drawPixels();
      model.on("pixels", drawPixels);
      model.on("layout", () => { hovered = -1; drawAxes(); showTip(); });
      model.on("ranges", showTip);
      model.on("title", () => { title.textContent = model.title; });
    }
    """
