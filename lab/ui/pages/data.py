"""The Data page: pick a toy set and see it; train the default model on it in the background and see the result."""

from __future__ import annotations

from typing import Any

import numpy as np
import panel as pn
import param

from lab.config import ConfigError, ExperimentConfig, apply_overrides
from lab.data.toy2d import make_toy_data
from lab.jobs.manager import JobManager
from lab.snapshots.kinds import NODES
from lab.ui.pages.knobs import Knob, config_overrides, knob_class, toy_data_knobs
from lab.ui.pages.page import Page
from lab.ui.views.live_curves import LiveCurves
from lab.ui.views.live_grid import LiveDecision
from lab.viz.toy2d import points

KNOBS: dict[str, Knob] = {
    **toy_data_knobs("seed"),
    "steps": Knob(param.Integer(default=400, bounds=(10, 20000), doc="training steps"), "Training",
                  "train.max_steps"),
}


class DataPage(knob_class("_DataKnobs", KNOBS, Page)):
    """Toy datasets and a one-button training run of the lab's default 32 × 32 residual MLP."""

    title = "Data"
    knobs = KNOBS

    train = param.Event(label="Train the default model")
    stop = param.Event(label="Stop")

    def __init__(self, manager: JobManager | None = None, base: ExperimentConfig | None = None,
                 **params: Any) -> None:
        super().__init__(manager, **params)
        self.base = base or ExperimentConfig()
        self.data_pane = pn.pane.HoloViews()
        # live plots update in place: only the changed data travels to the browser, not a new figure
        self.decision = LiveDecision(size=360)
        self.curves = LiveCurves()
        self.follower.on_metrics(self.curves.extend)
        self.follower.on_snapshot(NODES, self._new_snapshot)
        self._views = pn.Column(pn.Row(self.data_pane, self.decision.pane), self.curves.pane)
        self.follower.add_views(self._views)
        self._draw_data()

    # -- config -----------------------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The experiment the Train button starts: the lab default with this page's data settings."""
        return apply_overrides(self.base, {
            "name": f"data-{self.dataset}", **config_overrides(self, KNOBS), "train.epochs": 100_000,
            "train.eval_every": max(10, self.steps // 20)})

    @param.depends("dataset", "n", "noise", "train_fraction", "seed", watch=True)
    def _draw_data(self) -> None:
        try:
            data = make_toy_data(self.config().data)
        except (ConfigError, ValueError) as err:
            self.follower.status.error(str(err))
            return
        title = f"{self.dataset}: {len(data.x_train)} train (circles), {len(data.x_test)} test (triangles)"
        layers = points(data.x_train.numpy(), data.y_train.numpy(), label="train")
        if len(data.x_test):
            layers = layers * points(data.x_test.numpy(), data.y_test.numpy(), label="test", marker="triangle")
        self.data = data
        self.data_pane.object = layers.opts(title=title, frame_width=360, frame_height=360, xlim=(-1, 1),
                                            ylim=(-1, 1))
        # the decision map under the training points: neutral until a run publishes its first snapshot
        self._x, self._y = data.x_train.numpy(), data.y_train.numpy()
        self.decision.show(np.full((50, 50), 0.5, np.float32), 0, self._x, self._y)

    # -- training ---------------------------------------------------------------------------------------------
    @param.depends("train", watch=True)
    def _start(self) -> None:
        if self.follower.running:
            self.follower.status.error("A run is already in progress on this page; stop it first.", "warning")
            return
        try:
            cfg = self.config()
        except ConfigError as err:
            self.follower.status.error(str(err))
            return
        if self.follower.start(cfg, cadence={NODES: (0, 0.5)}, disk_every_s=0) is not None:
            self.curves.clear()

    @param.depends("stop", watch=True)
    def _stop(self) -> None:
        self.follower.stop()

    def _new_snapshot(self, snapshot: dict[str, np.ndarray]) -> None:
        self.decision.show(snapshot["decision"], int(snapshot["step"]), self._x, self._y, float(snapshot["limit"]))

    # -- layout -----------------------------------------------------------------------------------------------
    def controls(self) -> pn.viewable.Viewable:
        widgets = pn.Param(self, parameters=[*KNOBS, "train", "stop"], show_name=False,
                           widgets={"train": {"color": "primary"}, "stop": {"color": "light"}})
        return pn.Column(widgets, self.follower, self.notice, sizing_mode="stretch_width")

    def views(self) -> pn.viewable.Viewable:
        return self._views
