"""A run's saved frames, read-only: each kind of frame its folder holds, replayed in the view that drew it live.

A run trained by a page (or by ``python -m lab train --snapshot-every N``) keeps frames under ``snapshots/``
(``<kind>-<step>.npz``, :meth:`~lab.runs.store.Run.load_snapshot`). Opened on the Runs page, they are replayed with a
step slider: ``nodes`` frames in the Playground's node grid and decision map (over the run's training points, rebuilt
from its config), ``alignment`` frames in the Alignment views. Nothing is trained and nothing is written; a frame
that cannot be read (being replaced, corrupt) leaves the one on screen.
"""

from __future__ import annotations

import contextlib

import numpy as np
import panel as pn

from lab.config import ConfigError
from lab.data.toy2d import TOY_DATASETS
from lab.runs.store import Run, RunFolderError, config_of_run
from lab.train.build import build_data
from lab.ui.text import markdown_pane
from lab.ui.views.live_alignment import AlignmentViews
from lab.ui.views.live_grid import LiveDecision, LiveGrid

VIEWS = {"nodes": "Node maps and decision boundary (the Playground's views)",
         "alignment": "Residual Alignment (the Alignment page's views)"}
"""The kinds of saved frame that have a view, and how the chooser names them."""


class SavedFrames:
    """The saved frames of one run: a chooser of kind, a step slider and the kind's view.

    Attributes:
        layout: what a page shows (hidden while the run has no frame of a kind in :data:`VIEWS`).
        grid, decision: the node grid and decision map (``nodes``).
        alignment: the Alignment views (``alignment``; None until a run with such frames is opened).
    """

    def __init__(self) -> None:
        self.run: Run | None = None
        self.kind = pn.widgets.Select(label="Saved frames", options={}, width=420)
        self.step = pn.widgets.DiscreteSlider(label="Step", options=[0], value=0, width=420)
        self.grid, self.decision = LiveGrid(), LiveDecision()
        self.alignment: AlignmentViews | None = None  # made when first shown: its figures cost a page that has none
        self.title = markdown_pane("", margin=(0, 10))
        self._body = pn.Column(sizing_mode="stretch_width")
        self._points: tuple[np.ndarray, np.ndarray] = (np.zeros((0, 2), np.float32), np.zeros(0, np.int64))
        self.layout = pn.Column(self.title, pn.Row(self.kind, self.step), self._body, sizing_mode="stretch_width",
                                visible=False)
        self.kind.param.watch(lambda _: self._kind_changed(), "value")
        self.step.param.watch(lambda _: self.draw(), "value")

    def open(self, run: Run | None) -> None:
        """Replay ``run``'s frames (None: show nothing)."""
        self.run = run
        self._points = (np.zeros((0, 2), np.float32), np.zeros(0, np.int64))
        if run is not None:
            with contextlib.suppress(RunFolderError, ConfigError, ValueError, OSError):
                cfg = config_of_run(run)
                if cfg.data.name in TOY_DATASETS:  # the points the node maps are drawn over
                    data = build_data(cfg)
                    self._points = (data.x_train.numpy(), data.y_train.numpy())
        self.kind.options = {}
        self.refresh(opened=True)

    def refresh(self, opened: bool = False) -> None:
        """Offer the kinds and steps on disk now: the slider grows while the run writes frames, and stays on the
        newest when it was there; ``opened``: a run was just opened, whose newest frame is drawn."""
        on_disk = {} if self.run is None else {k: self.run.snapshot_versions(k) for k in VIEWS}
        kinds = {VIEWS[k]: k for k, versions in on_disk.items() if versions}
        self.layout.visible = bool(kinds)
        if kinds != self.kind.options:
            self.kind.options = kinds
            if self.kind.value not in kinds.values() and kinds:
                self.kind.value = next(iter(kinds.values()))  # draws it (_kind_changed)
                return
        if kinds:
            self._steps(on_disk[self.kind.value], opened=opened)

    def _kind_changed(self) -> None:
        kind = self.kind.value
        if kind == "alignment" and self.alignment is None:
            self.alignment = AlignmentViews()
        self._body[:] = ([self.grid.pane, self.decision.pane] if kind == "nodes"
                         else [pn.Column(*self.alignment.rows())] if kind == "alignment" else [])
        if self.run is not None and kind in VIEWS:
            self._steps(self.run.snapshot_versions(kind), opened=True)

    def _steps(self, versions: list[int], opened: bool = False) -> None:
        """Offer the steps ``versions`` of the chosen kind on the slider: at the newest when it was there, or when
        this run or kind was just ``opened``, whose frame is then drawn even where the slider stays (another run's
        frames may sit at the same steps). The slider's watcher draws a step it moves to."""
        if not versions:
            return
        value = self.step.value
        if opened or value == self.step.options[-1] or value not in versions:
            value = versions[-1]
        moved = value != self.step.value
        self.step.param.update(options=versions, value=value)  # together: the watcher sees the final step once
        if opened and not moved:
            self.draw()

    def draw(self) -> None:
        """Draw the chosen step's frame in its kind's view."""
        kind, run = self.kind.value, self.run
        if run is None or kind not in VIEWS:
            return
        loaded = run.load_snapshot(kind, int(self.step.value))
        if loaded is None:
            return
        step, frame = loaded[0], loaded[1].float32()
        self.title.object = f"**{VIEWS[kind]}** at step {step}, from `snapshots/` (read-only)"
        if kind == "nodes":
            L, H = frame["maps"].shape[:2]
            self.grid.show(frame, layers=(0, L), nodes=(0, H), normalize="tile", points=self._points)
            self.decision.show(frame["decision"], step, *self._points, float(frame.get("limit", 1.0)))
        else:
            self.alignment.show(frame)
