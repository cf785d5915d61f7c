"""HoloViews elements for the toy 2-D sets: points, decision maps and training curves (pure; no Panel state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import holoviews as hv
import numpy as np

from lab.viz.palette import BLUE, CLASS_COLORS, DIVERGING, ORANGE

hv.util.extension("bokeh")  # the Bokeh backend only: a notebook loads BokehJS with lab.ui.extension()


def points(x: np.ndarray, y: np.ndarray, *, label: str = "", size: int = 4, alpha: float = 0.8,
           marker: str = "circle") -> hv.Points:
    """Scatter of 2-D points ``x [n, 2]`` coloured by class ``y [n]`` in Playground's orange/blue."""
    x, y = np.asarray(x, np.float32), np.asarray(y)
    data = {"x": x[:, 0], "y": x[:, 1], "class": y.astype(str)}
    classes = sorted(set(data["class"]))
    cmap = {c: CLASS_COLORS[int(c) % 2] for c in classes}
    return hv.Points(data, kdims=["x", "y"], vdims=["class"], label=label).opts(
        color="class", cmap=cmap, size=size, alpha=alpha, marker=marker, line_color="white", line_width=0.5,
        tools=["hover"], show_legend=False)


def decision_map(decision: np.ndarray, limit: float = 1.0, *, title: str = "") -> hv.Image:
    """``decision [R, R]``: probability of class 1 over the grid (row i at the i-th y from the bottom, as
    :func:`lab.data.evaluation_grid.grid` orders points), drawn orange → blue. ``hv.Image`` puts row 0 at the top, hence
    the flip."""
    img = hv.Image(np.flipud(np.asarray(decision, np.float32)), bounds=(-limit, -limit, limit, limit),
                   kdims=["x", "y"], vdims=[hv.Dimension("p1", range=(0, 1))])
    return img.opts(cmap=DIVERGING, clim=(0.0, 1.0), alpha=0.75, title=title, tools=["hover"])


def decision_overlay(decision: np.ndarray, step: int, x: np.ndarray, y: np.ndarray, limit: float = 1.0, *,
                     size: int = 300, max_points: int = 2000) -> hv.Overlay:
    """The Playground's decision map at ``step`` under the training points ``x [n, 2]``, ``y [n]`` (evenly
    subsampled to ``max_points``), ``size`` pixels square: the figure of its exports and of a run's replay."""
    keep = np.linspace(0, len(x) - 1, min(len(x), max_points)).astype(int) if len(x) else []
    return (decision_map(decision, limit, title=f"Decision boundary at step {step}")
            * points(x[keep], y[keep])).opts(frame_width=size, frame_height=size, xlim=(-limit, limit),
                                              ylim=(-limit, limit))


def boundary(decision: np.ndarray, x: np.ndarray, y: np.ndarray, limit: float = 1.0, *,
             test: tuple[np.ndarray, np.ndarray] | None = None, title: str = "Decision boundary") -> hv.Overlay:
    """Decision map with the training points (circles) and, optionally, the test points (triangles)."""
    layers = [decision_map(decision, limit), points(x, y, label="train")]
    if test is not None and len(test[0]):
        layers.append(points(test[0], test[1], label="test", marker="triangle", size=5))
    return hv.Overlay(layers).opts(title=title, frame_width=360, frame_height=360,
                                   xlim=(-limit, limit),
                                   ylim=(-limit, limit))


def _curve_points(records: Sequence[dict[str, Any]], split: str) -> list[tuple[int, float, float]]:
    return [(r["step"], r[f"{split}_loss"], r[f"{split}_acc"]) for r in records
            if r.get("kind") == "eval" and f"{split}_loss" in r]


def loss_curves(records: Sequence[dict[str, Any]] = (), *, title: str = "Loss") -> hv.Overlay:
    """Batch loss and train/test loss (log scale) against step, from ``metrics.jsonl`` records."""
    batch = [r for r in records if r.get("kind") == "step"]
    curves = [hv.Curve(([r["step"] for r in batch], [r["loss"] for r in batch]), "step", "loss",
                       label="batch loss").opts(color="#bbbbbb")]
    for split, color in (("train", BLUE), ("test", ORANGE)):
        pts = _curve_points(records, split)
        curves.append(hv.Curve(([p[0] for p in pts], [p[1] for p in pts]), "step", "loss",
                               label=f"{split} loss").opts(color=color))
    return hv.Overlay(curves).opts(logy=True, title=title, legend_position="top_right", show_grid=True,
                                   frame_width=360, frame_height=200, framewise=True)


def accuracy_curves(records: Sequence[dict[str, Any]] = (), *, title: str = "Accuracy") -> hv.Overlay:
    """Train/test accuracy against step, from ``metrics.jsonl`` records."""
    curves = []
    for split, color in (("train", BLUE), ("test", ORANGE)):
        pts = _curve_points(records, split)
        curves.append(hv.Curve(([p[0] for p in pts], [p[2] for p in pts]), "step", "accuracy",
                               label=f"{split} acc").opts(color=color))
    return hv.Overlay(curves).opts(ylim=(0, 1.02), legend_position="bottom_right", show_grid=True, title=title,
                                   framewise=True,
                                   frame_width=360, frame_height=200)


def training_curves(records: Sequence[dict[str, Any]] = ()) -> hv.Layout:
    """Loss and accuracy side by side."""
    return (loss_curves(records) + accuracy_curves(records)).opts(shared_axes=False)
