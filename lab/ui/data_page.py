"""The Data page: pick a toy set and see it; train the default model on it in the background and see the result."""

from __future__ import annotations

from typing import Any

import holoviews as hv
import numpy as np
import panel as pn
import param

from lab.config import ConfigError, ExperimentConfig, apply_overrides
from lab.data.toy2d import TOY_DATASETS, make_toy_data
from lab.jobs.manager import JobManager, ManagerBusy, get_manager
from lab.jobs.thread import Job
from lab.ui.live_grid import LiveDecision
from lab.ui.status import JobStatus
from lab.viz.toy2d import accuracy_curves, loss_curves, points


class DataPage(pn.viewable.Viewer):
    """Toy datasets and a one-button training run of the lab's default 32 × 32 residual MLP."""

    title = "Data"
    url_parameters = ("dataset", "n", "noise", "train_fraction", "seed", "steps")

    dataset = param.Selector(default="spiral", objects=list(TOY_DATASETS), doc="toy 2-D set")
    n = param.Integer(default=4096, bounds=(100, 16384), doc="samples (half per class)")
    noise = param.Number(default=0.0, bounds=(0.0, 0.5), step=0.01, doc="noise level")
    train_fraction = param.Number(default=0.8, bounds=(0.1, 1.0), step=0.05, doc="share used for training")
    seed = param.Integer(default=0, bounds=(0, 2**31 - 1), doc="data seed")
    steps = param.Integer(default=400, bounds=(10, 20000), doc="training steps")
    train = param.Event(label="Train the default model")
    stop = param.Event(label="Stop")

    def __init__(self, manager: JobManager | None = None, base: ExperimentConfig | None = None,
                 **params: Any) -> None:
        super().__init__(**params)
        self.manager = manager or get_manager()
        self.base = base or ExperimentConfig()
        self.job: Job | None = None
        self.status = JobStatus()
        self._cursor, self._records, self._frame_version = 0, [], None
        self._data_pane = pn.pane.HoloViews(sizing_mode="fixed")
        self._curves_pane = pn.pane.HoloViews(sizing_mode="fixed")
        self._callback = None
        # Live plots update in place: only the changed data travels to the browser, not a new figure.
        self._decision = LiveDecision(size=360)
        self._records_pipe = hv.streams.Pipe(data=[])
        self._curves_pane.object = (
            hv.DynamicMap(lambda data: loss_curves(data), streams=[self._records_pipe])
            + hv.DynamicMap(lambda data: accuracy_curves(data), streams=[self._records_pipe])).opts(shared_axes=False)
        self._draw_data()

    # -- config -----------------------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The experiment the Train button starts: the lab default with this page's data settings."""
        n = self.n + self.n % 2
        return apply_overrides(self.base, {
            "name": f"data-{self.dataset}", "data.name": self.dataset, "data.n": n, "data.noise": self.noise,
            "data.train_fraction": self.train_fraction, "data.seed": self.seed,
            "train.max_steps": self.steps, "train.epochs": 100_000, "train.eval_every": max(10, self.steps // 20)})

    @param.depends("dataset", "n", "noise", "train_fraction", "seed", watch=True)
    def _draw_data(self) -> None:
        try:
            data = make_toy_data(self.config().data)
        except (ConfigError, ValueError) as err:
            self.status.error(str(err))
            return
        title = f"{self.dataset}: {len(data.x_train)} train (circles), {len(data.x_test)} test (triangles)"
        layers = points(data.x_train.numpy(), data.y_train.numpy(), label="train")
        if len(data.x_test):
            layers = layers * points(data.x_test.numpy(), data.y_test.numpy(), label="test", marker="triangle")
        self._data = data
        self._data_pane.object = layers.opts(title=title, frame_width=360, frame_height=360, xlim=(-1, 1),
                                             ylim=(-1, 1))
        self._draw_result_frame(data)

    def _draw_result_frame(self, data) -> None:
        """The decision map under the training points: neutral until a run publishes its first frame."""
        self._x, self._y = data.x_train.numpy(), data.y_train.numpy()
        self._decision.show(np.full((50, 50), 0.5, np.float32), 0, self._x, self._y)

    # -- training ---------------------------------------------------------------------------------------------
    @param.depends("train", watch=True)
    def _start(self) -> None:
        if self.job is not None and self.job.is_alive():
            self.status.error("A run is already in progress on this page; stop it first.", "warning")
            return
        try:
            cfg = self.config()
            owner = getattr(pn.state.curdoc, "session_context", None)
            self.job = self.manager.start_thread(cfg, owner=getattr(owner, "id", None),
                                                 cadence={"nodes": (0, 0.5)}, disk_every_s=0)
        except (ManagerBusy, ConfigError, ValueError) as err:
            self.status.error(str(err), "warning" if isinstance(err, ManagerBusy) else "danger")
            return
        self.status.clear()
        self._cursor, self._records, self._frame_version = 0, [], None
        if self._callback is None and pn.state.curdoc is not None and pn.state.curdoc.session_context:
            self._callback = pn.state.add_periodic_callback(self.poll, period=500)

    @param.depends("stop", watch=True)
    def _stop(self) -> None:
        if self.job is not None:
            self.job.stop()
            self.poll()

    def poll(self) -> None:
        """Pull the job's status, metrics and latest snapshot, and redraw (runs on the session's thread)."""
        if self.job is None:
            return
        status = self.job.status()
        self.status.show(status)
        new, self._cursor = self.job.metrics_since(self._cursor)
        if new:
            self._records.extend(new)
            self._records_pipe.send(list(self._records))
        latest = self.job.latest("nodes")
        if latest is not None and latest[0] != self._frame_version:
            self._frame_version, frame = latest
            self._decision.show(frame["decision"], int(frame["step"]), self._x, self._y, float(frame["limit"]))
        if not self.job.is_alive() and self._callback is not None:
            self._callback.stop()
            self._callback = None

    # -- layout -----------------------------------------------------------------------------------------------
    def controls(self) -> pn.viewable.Viewable:
        widgets = pn.Param(self, parameters=["dataset", "n", "noise", "train_fraction", "seed", "steps", "train",
                                             "stop"], show_name=False,
                           widgets={"train": {"button_type": "primary"}, "stop": {"button_type": "light"}})
        return pn.Column(widgets, self.status)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(pn.Row(self._data_pane, self._decision.pane), self._curves_pane)
