"""The Playground: seed 003's TFMeter grid of a deep residual MLP, live while it trains, with every knob.

Training settings (data, model, optimisation) rebuild the model; view settings (layer and node range, colour
normalisation, replayed snapshot) only redraw from the latest snapshot and never touch the job. All plots are
DynamicMaps fed by streams, so each redraw sends data, not new figures. Settings live in the URL query.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import holoviews as hv
import numpy as np
import panel as pn
import param
import yaml
from bokeh.embed import file_html
from bokeh.resources import INLINE
from PIL import Image

from lab.config import ConfigError, ExperimentConfig, apply_overrides, to_dict
from lab.data.toy2d import TOY_DATASETS, make_toy_data
from lab.jobs.manager import JobManager, ManagerBusy, get_manager
from lab.jobs.snapshots import nodes_snapshot
from lab.jobs.thread import Job
from lab.nn.mlp import ACTIVATIONS
from lab.shortcuts import DECAYED, SCHEDULES, block_scales
from lab.train.build import build_model
from lab.ui.live_grid import LiveDecision, LiveGrid
from lab.ui.status import JobStatus
from lab.viz.node_grid import alpha_bars, mosaic, node_grid, similarity_heatmaps
from lab.viz.toy2d import accuracy_curves, loss_curves

TRAINING = ("dataset", "n", "noise", "train_fraction", "depth", "width", "activation", "shortcut", "alpha_min",
            "droppath", "drop_rate", "lr", "batch_size", "data_seed", "init_seed", "snapshot_every")
VIEW = ("layer_range", "node_range", "normalize")


class _Frame:
    """A stand-in trainer for :func:`nodes_snapshot`: the frame of a model that is not training."""

    def __init__(self, model) -> None:
        self.model = model


class PlaygroundPage(pn.viewable.Viewer):
    """Train the residual MLP on a toy set and watch every node of every layer."""

    title = "Playground"
    url_parameters = TRAINING + VIEW

    dataset = param.Selector(default="spiral", objects=list(TOY_DATASETS))
    n = param.Integer(default=4096, bounds=(100, 16384), doc="samples (half per class)")
    noise = param.Number(default=0.0, bounds=(0.0, 0.5), step=0.01)
    train_fraction = param.Number(default=0.8, bounds=(0.1, 1.0), step=0.05)
    depth = param.Integer(default=32, bounds=(1, 64), doc="residual blocks L")
    width = param.Integer(default=32, bounds=(1, 64), doc="nodes per layer H")
    activation = param.Selector(default="gelu", objects=list(ACTIVATIONS))
    shortcut = param.Selector(default="identity", objects=list(SCHEDULES), doc="α schedule")
    alpha_min = param.Number(default=1.0, bounds=(0.0, 1.0), step=0.05, doc="last block's α (decayed schedules)")
    droppath = param.Selector(default="off", objects=["off", "droppath", "residual_droppath"])
    drop_rate = param.Number(default=0.2, bounds=(0.0, 0.9), step=0.05)
    lr = param.Number(default=0.01, bounds=(1e-4, 1.0), step=1e-3, doc="Adam learning rate")
    batch_size = param.Integer(default=256, bounds=(1, 4096))
    data_seed = param.Integer(default=0, bounds=(0, 2**31 - 1))
    init_seed = param.Integer(default=0, bounds=(0, 2**31 - 1))
    snapshot_every = param.Integer(default=10, bounds=(1, 500), doc="steps between frames")

    layer_range = param.Range(default=(0, 33), bounds=(0, 65), step=1, doc="layers shown (0 = stem)")
    node_range = param.Range(default=(0, 32), bounds=(0, 64), step=1, doc="nodes shown")
    normalize = param.Selector(default="tile", objects=["tile", "layer", "global"], doc="colour range per")
    history = param.Integer(default=0, bounds=(0, 0), doc="replay a recorded frame (rightmost = live)")

    play = param.Event(label="Start / pause")
    step = param.Event(label="One step")
    reset = param.Event(label="Reset")

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.manager = manager or get_manager()
        self.job: Job | None = None
        self.status = JobStatus()
        self._notice = pn.pane.Alert("", alert_type="info", visible=False, margin=(5, 10))
        self._frame: dict[str, np.ndarray] | None = None
        self._versions = {"nodes": None, "similarity": None}
        self._history_steps: list[int] = []
        self._cursor, self._records = 0, []
        self._curves_t = 0.0
        self._callback = None
        self._live_grid = LiveGrid()
        self._live_decision = LiveDecision()
        self._similarity_pipe = hv.streams.Pipe(data=None)
        self._records_pipe = hv.streams.Pipe(data=[])
        self._alpha_pipe = hv.streams.Pipe(data=np.ones(1, np.float32))
        self._build_panes()
        self._rebuild()

    # -- configuration ----------------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The experiment the current settings describe (validated: raises ConfigError with the reason)."""
        return apply_overrides(ExperimentConfig(), {
            "name": f"playground-{self.dataset}",
            "model.depth": self.depth, "model.width": self.width, "model.activation": self.activation,
            "model.shortcut": self.shortcut, "model.alpha_min": self.alpha_min, "model.seed": self.init_seed,
            "data.name": self.dataset, "data.n": self.n + self.n % 2, "data.noise": self.noise,
            "data.train_fraction": self.train_fraction, "data.seed": self.data_seed,
            "train.lr": self.lr, "train.batch_size": self.batch_size, "train.droppath": self.droppath,
            "train.drop_rate": self.drop_rate if self.droppath != "off" else 0.0, "train.epochs": 1000,
            "train.eval_every": 50, "train.log_every": 5})

    @param.depends(*TRAINING, watch=True)
    def _training_changed(self) -> None:
        self._alpha_pipe.send(self._alphas())
        if self.job is not None and self.job.is_alive():
            self._notice.object = ("Training settings changed. **Reset** to rebuild the model with them "
                                   "(this stops the current run; its folder stays on disk).")
            self._notice.alert_type, self._notice.visible = "warning", True
            return
        self._rebuild()

    def _alphas(self) -> np.ndarray:
        return np.array([a for a, _ in block_scales(self.shortcut, self.depth, self.alpha_min)], np.float32)

    def _rebuild(self) -> None:
        """A fresh, untrained model from the settings: its frame is drawn before any training."""
        self._notice.visible = False
        try:
            cfg = self.config()
            data = make_toy_data(cfg.data)
        except (ConfigError, ValueError) as err:
            self.status.error(f"Invalid settings: {err}")
            return
        self.status.clear()
        if self.shortcut not in DECAYED and self.alpha_min < 1.0:
            self._notice.object = f"alpha_min has no effect with the {self.shortcut} schedule."
            self._notice.alert_type, self._notice.visible = "info", True
        self._data = data
        self._x, self._y = data.x_train.numpy(), data.y_train.numpy()
        self.param.layer_range.bounds = (0, cfg.model.depth + 1)
        self.param.node_range.bounds = (0, cfg.model.width)
        self.layer_range = (min(self.layer_range[0], cfg.model.depth), min(max(self.layer_range[1], 1),
                                                                           cfg.model.depth + 1))
        self.node_range = (min(self.node_range[0], cfg.model.width - 1), min(max(self.node_range[1], 1),
                                                                             cfg.model.width))
        self._frame = nodes_snapshot(_Frame(build_model(cfg)))
        self._frame["step"] = np.int64(0)
        self._alpha_pipe.send(self._alphas())
        self._records, self._cursor = [], 0
        self._records_pipe.send([])
        self._history_steps = []
        self.param.history.bounds = (0, 0)
        self.history = 0
        self._draw()

    # -- actions ----------------------------------------------------------------------------------------------
    def _start(self, paused: bool) -> bool:
        try:
            session = getattr(pn.state.curdoc, "session_context", None) if pn.state.curdoc else None
            self.job = self.manager.start_thread(
                self.config(), owner=getattr(session, "id", None), paused=paused,
                cadence={"nodes": (self.snapshot_every, 0.0), "similarity": (0, 5.0)})
        except (ManagerBusy, ConfigError, ValueError) as err:
            self.status.error(str(err), "warning" if isinstance(err, ManagerBusy) else "danger")
            return False
        self._versions = {"nodes": None, "similarity": None}
        self._cursor, self._records = 0, []
        self._ensure_polling()
        return True

    @param.depends("play", watch=True)
    def _play(self) -> None:
        if self.job is None or not self.job.is_alive():
            self._start(paused=False)
        elif self.job.status().get("state") == "paused":
            self.job.resume()
        else:
            self.job.pause()

    @param.depends("step", watch=True)
    def _one_step(self) -> None:
        if (self.job is None or not self.job.is_alive()) and not self._start(paused=True):
            return
        self.job.step(1)

    @param.depends("reset", watch=True)
    def _reset(self) -> None:
        if self.job is not None:
            self.job.stop()
            self.job = None
        self.status.show({"state": "ready", "step": 0})
        self._rebuild()

    # -- live updates -----------------------------------------------------------------------------------------
    def _ensure_polling(self) -> None:
        if self._callback is None and pn.state.curdoc is not None and pn.state.curdoc.session_context:
            self._callback = pn.state.add_periodic_callback(self.poll, period=500)

    def poll(self) -> None:
        """Pull status, metrics and new snapshots from the job and redraw what changed (session thread)."""
        if self.job is None:
            return
        self.status.show(self.job.status())
        new, self._cursor = self.job.metrics_since(self._cursor)
        self._records.extend(new)
        now = time.monotonic()
        # curves redraw every 2 s at most: re-rendering them costs more than a grid frame
        if new and (now - self._curves_t >= 2.0 or not self.job.is_alive()):
            self._curves_t = now
            self._records_pipe.send(list(self._records))
        latest = self.job.latest("nodes")
        if latest is not None and latest[0] != self._versions["nodes"]:
            self._versions["nodes"], frame = latest
            self._history_steps.append(int(frame["step"]))
            live = self.history >= self.param.history.bounds[1]
            self.param.history.bounds = (0, len(self._history_steps) - 1)
            if live:
                self._frame = frame
                with param.discard_events(self):  # follow the live end without replaying from disk
                    self.history = len(self._history_steps) - 1
                self._draw()
        sim = self.job.latest("similarity")
        if sim is not None and sim[0] != self._versions["similarity"]:
            self._versions["similarity"], arrays = sim
            self._similarity_pipe.send((arrays["distance"], arrays["cka"]))
        if not self.job.is_alive() and self._callback is not None:
            self._callback.stop()
            self._callback = None

    @param.depends(*VIEW, watch=True)
    def _draw(self) -> None:
        if self._frame is not None:
            self._live_grid.show(self._frame, **self._view())
            self._live_decision.show(self._frame["decision"], int(self._frame["step"]), self._x, self._y,
                                     float(self._frame.get("limit", 1.0)))

    def _view(self) -> dict[str, Any]:
        return {"layers": tuple(int(v) for v in self.layer_range), "nodes": tuple(int(v) for v in self.node_range),
                "normalize": self.normalize, "points": (self._x, self._y)}

    @param.depends("history", watch=True)
    def _replay(self) -> None:
        """Show a recorded frame: the newest on-disk snapshot at or before the chosen frame's step."""
        if not self._history_steps or self.history >= len(self._history_steps) - 1 or self.job is None:
            if self.job is not None and (latest := self.job.latest("nodes")) is not None:
                self._frame = latest[1]
                self._draw()
            return
        wanted = self._history_steps[self.history]
        on_disk = [v for v in self.job.run.snapshot_versions("nodes") if v <= wanted]
        found = self.job.run.load_snapshot("nodes", on_disk[-1]) if on_disk else None
        if found is not None:
            self._frame = {k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in found[1].items()}
            self._draw()

    # -- views ------------------------------------------------------------------------------------------------
    def _similarity(self, data: tuple[np.ndarray, np.ndarray] | None) -> hv.Layout:
        if data is None:
            empty = np.zeros((self.depth + 1, self.depth + 1), np.float32)
            data = (empty, empty)
        return similarity_heatmaps(*data)

    def _build_panes(self) -> None:
        self._curves_pane = pn.pane.HoloViews(
            (hv.DynamicMap(lambda data: loss_curves(data), streams=[self._records_pipe])
             + hv.DynamicMap(lambda data: accuracy_curves(data), streams=[self._records_pipe])).opts(shared_axes=False),
            sizing_mode="fixed")
        self._similarity_pane = pn.pane.HoloViews(
            hv.DynamicMap(self._similarity, streams={"data": self._similarity_pipe}), sizing_mode="fixed")
        self._alpha_pane = pn.pane.HoloViews(
            hv.DynamicMap(lambda data: alpha_bars(data).opts(framewise=True, width=360),
                          streams={"data": self._alpha_pipe}), sizing_mode="fixed")

    # -- export -----------------------------------------------------------------------------------------------
    def grid_png(self) -> io.BytesIO:
        """The current node grid (mosaic of tiles) as a PNG."""
        view = self._view()
        m = mosaic(self._frame, layers=view["layers"], nodes=view["nodes"], normalize=view["normalize"])
        out = io.BytesIO()
        Image.fromarray(m.rgba(), "RGBA").save(out, format="PNG")
        out.seek(0)
        return out

    def plots_html(self) -> io.BytesIO:
        """The grid, decision map and α chart of the current frame as one standalone HTML file."""
        decision = self._live_decision.element(self._frame["decision"], int(self._frame["step"]), self._x, self._y,
                                               float(self._frame.get("limit", 1.0)))
        layout = (node_grid(self._frame, **self._view()) + decision + alpha_bars(self._alphas())).cols(1)
        html = file_html(hv.render(layout, backend="bokeh"), INLINE, "Residual Lab Playground")
        return io.BytesIO(html.encode())

    def snapshot_npz(self) -> io.BytesIO:
        out = io.BytesIO()
        np.savez_compressed(out, **self._frame)
        out.seek(0)
        return out

    def config_yaml(self) -> io.BytesIO:
        return io.BytesIO(yaml.safe_dump(to_dict(self.config()), sort_keys=False).encode())

    def _downloads(self) -> pn.viewable.Viewable:
        kinds = [("Grid PNG", self.grid_png, "node_grid.png"), ("Plots HTML", self.plots_html, "playground.html"),
                 ("Snapshot npz", self.snapshot_npz, "snapshot.npz"), ("Config YAML", self.config_yaml,
                                                                        "config.yaml")]
        return pn.Row(*[pn.widgets.FileDownload(callback=cb, filename=name, label=label, button_type="light",
                                                embed=False, width=120) for label, cb, name in kinds])

    def settings_json(self) -> str:
        """The page's settings (what the URL query carries), as JSON."""
        return json.dumps({p: getattr(self, p) for p in self.url_parameters})

    # -- layout -----------------------------------------------------------------------------------------------
    def controls(self) -> pn.viewable.Viewable:
        buttons = pn.Row(
            pn.widgets.Button.from_param(self.param.play, button_type="primary", width=110),
            pn.widgets.Button.from_param(self.param.step, width=90),
            pn.widgets.Button.from_param(self.param.reset, width=80))
        data = pn.Param(self, parameters=["dataset", "n", "noise", "train_fraction", "data_seed"],
                        show_name=False)
        model = pn.Param(self, parameters=["depth", "width", "activation", "shortcut", "alpha_min", "init_seed"],
                         show_name=False)
        train = pn.Param(self, parameters=["droppath", "drop_rate", "lr", "batch_size", "snapshot_every"],
                         show_name=False)
        view = pn.Param(self, parameters=["layer_range", "node_range", "normalize", "history"], show_name=False)
        return pn.Column(buttons, self.status, self._notice,
                         pn.Accordion(("Data", data), ("Model", model), ("Training", train), ("View", view),
                                      active=[1, 3], sizing_mode="stretch_width"))

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            self._live_grid.pane,
            pn.Row(self._live_decision.pane, pn.Column(self._alpha_pane, self._downloads())),
            self._curves_pane, self._similarity_pane)
