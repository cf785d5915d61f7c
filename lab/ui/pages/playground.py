"""The Playground: the TFMeter grid of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections* — every
node's output over the input plane for a deep residual MLP — live while it trains, with every knob.

Training settings (data, model, optimisation) rebuild the model; view settings (layer and node range, colour
normalisation, replayed snapshot) only redraw and never touch the job. Every setting is one row of :data:`KNOBS`,
which also names it in the URL query and in the config. The grid, the decision map and the curves are drawn once
and then updated in place; snapshots are built on demand, one ahead of the browser: the next is asked for as one is
sent and sent once the browser has drawn the last one while the grid was on screen
(:meth:`~lab.ui.follower.JobFollower.pace`), so at most one is computed that nobody will see. Every
kind registered to be drawn live here (:func:`lab.ui.views.replays.register` with ``live_on=("Playground",)``) is
laid out below the page's own views, built by the job at its kind's cadence and drawn as it lands.
"""

from __future__ import annotations

import contextlib
import io
import json
from functools import partial
from typing import Any

import holoviews as hv
import numpy as np
import panel as pn
import param
from bokeh.embed import file_html
from bokeh.resources import INLINE
from PIL import Image

from lab.analysis.node_maps import RESOLUTION
from lab.config import ConfigError, ExperimentConfig, apply_overrides
from lab.data.toy2d import make_toy_data
from lab.jobs.manager import JobManager
from lab.nn.mlp import ACTIVATIONS
from lab.shortcuts import DECAYED, SCHEDULES, block_scales
from lab.snapshots.builders import nodes_snapshot, similarity_snapshot
from lab.snapshots.kinds import KINDS, NODES, SIMILARITY, SnapshotError, check_snapshot
from lab.snapshots.snapshot import load_saved
from lab.train.build import build_model
from lab.ui.pages.knobs import Knob, config_overrides, knob_class, toy_data_knobs, view_names
from lab.ui.pages.training import Export, TrainingPage
from lab.ui.text import alert_pane
from lab.ui.views.live_alphas import LiveAlphas
from lab.ui.views.live_curves import LiveCurves
from lab.ui.views.live_grid import LiveDecision, LiveGrid
from lab.ui.views.replays import REPLAYS, Replay, live_kinds
from lab.viz.node_grid import FIT_PX, alpha_bars, cka_heatmap, distance_heatmap, mosaic, node_grid
from lab.viz.toy2d import decision_overlay

KNOBS: dict[str, Knob] = {
    **toy_data_knobs("data_seed"),
    "depth": Knob(param.Integer(default=32, bounds=(1, 64), doc="residual blocks L"), "Model", "model.depth"),
    "width": Knob(param.Integer(default=32, bounds=(1, 64), doc="nodes per layer H"), "Model", "model.width"),
    "activation": Knob(param.Selector(default="gelu", objects=list(ACTIVATIONS)), "Model", "model.activation"),
    "shortcut": Knob(param.Selector(default="identity", objects=list(SCHEDULES), doc="α schedule"), "Model",
                     "model.shortcut"),
    "alpha_min": Knob(param.Number(default=1.0, bounds=(0.0, 1.0), step=0.05, doc="last block's α (decayed "
                                   "schedules)"), "Model", "model.alpha_min"),
    "init_seed": Knob(param.Integer(default=0, bounds=(0, 2**31 - 1), doc="initialisation seed"), "Model",
                      "model.seed"),
    "droppath": Knob(param.Selector(default="off", objects=["off", "droppath", "residual_droppath"]), "Training",
                     "train.droppath"),
    "drop_path_rate": Knob(param.Number(default=0.2, bounds=(0.0, 0.9), step=0.05, doc="probability of dropping a "
                                        "block's branch"), "Training", "train.drop_path_rate",
                           to_config=lambda v, page: v if page.droppath != "off" else 0.0),
    "lr": Knob(param.Number(default=0.01, bounds=(1e-4, 1.0), step=1e-3, doc="Adam learning rate"), "Training",
               "train.lr"),
    "batch_size": Knob(param.Integer(default=256, bounds=(1, 4096)), "Training", "train.batch_size"),
    # 25: on a 2-core machine with the browser beside the job, the view then draws about 6 frames/s and training
    # keeps about 0.8-0.9 of its speed with no page; 10 drew about 8.6 frames/s and left training about 0.7
    # (bench/playground_live.py --snapshot-every N). A faster machine draws as often as its browser can.
    "snapshot_every": Knob(param.Integer(default=25, bounds=(1, 500), doc="at least this many steps between "
                                         "snapshots"), "Training"),
    "layer_range": Knob(param.Range(default=(0, 33), bounds=(0, 65), step=1, doc="layers shown (0 = stem)"),
                        "View", training=False),
    "node_range": Knob(param.Range(default=(0, 32), bounds=(0, 64), step=1, doc="nodes shown"), "View",
                       training=False),
    "normalize": Knob(param.Selector(default="tile", objects=["tile", "layer", "global"], doc="colour range per"),
                      "View", training=False),
    "grid_width": Knob(param.Integer(default=FIT_PX[0], bounds=(400, 2400), step=20,
                                     doc="pixels the node grid fits into (narrower in a notebook)"),
                       "View", training=False),
}
VIEW = view_names(KNOBS)
# fixed parts of the Playground's experiment: long enough to watch, evaluated often enough to see curves move
FIXED = {"train.epochs": 1000, "train.eval_every": 50, "train.log_every": 5}


class PlaygroundPage(knob_class("_PlaygroundKnobs", KNOBS, TrainingPage)):
    """Train the residual MLP on a toy set and watch every node of every layer.

    Shown as a notebook cell's value it is the whole page (controls and views) and follows its job live;
    served, the shell puts :meth:`controls` in the sidebar and :meth:`views` in the main area.
    """

    title = "Playground"
    knobs = KNOBS

    history = param.Integer(default=0, bounds=(-1, 0), constant=True,
                            doc="snapshots back from the live one (0 = live); moving it replays a recorded snapshot")

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(manager, **params)
        self.hint = alert_pane("", alert_type="info", visible=False, margin=(5, 10))  # about the settings
        self._data_cfg = None  # the data settings self._x, self._y were made from
        self.snapshot: dict[str, np.ndarray] | None = None  # the snapshot on screen
        self.history_steps: list[int] = []  # step of every snapshot received from the job, oldest first
        self.grid = LiveGrid()
        self.decision = LiveDecision(max_points=600)
        self.curves = LiveCurves()
        self._similarity_pipe = hv.streams.Pipe(data=None)
        self.alpha_chart = LiveAlphas()
        self.similarity = pn.Card(
            *(pn.pane.HoloViews(hv.DynamicMap(partial(self._similarity_view, key, view),
                                              streams={"data": self._similarity_pipe}))
              for key, view in (("distance", distance_heatmap), ("cka", cka_heatmap))),
            title="Layer similarity (Euclidean distance and linear CKA between layers)", collapsed=True, width=720)
        self.similarity.param.watch(self._similarity_toggled, "collapsed")
        self.follower.on_snapshot(NODES, self._new_snapshot)
        self.follower.on_snapshot(SIMILARITY, self._new_similarity)
        self.follower.on_metrics(self.curves.extend)
        self.follower.on_poll(self._show_history)
        self.live_views: dict[str, Replay] = {k.name: REPLAYS[k.name]() for k in live_kinds(self.title)}
        for kind in self.live_views:
            self.follower.on_snapshot(kind, partial(self._new_live, kind))
        self._views = pn.Column(
            self.follower.pace(self.grid.pane),
            pn.Row(self.decision.pane, pn.Column(self.alpha_chart.pane, self._downloads())),
            self.curves.pane, self.similarity, *(p for v in self.live_views.values() for p in v.panes()))
        self.follower.add_views(self._views, self.hint)
        self._rebuild()

    # -- configuration ----------------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The experiment the current settings describe (validated: raises ConfigError with the reason)."""
        return apply_overrides(ExperimentConfig(), {"name": f"playground-{self.dataset}",
                                                    **config_overrides(self, KNOBS), **FIXED})

    def _training_changed(self, *events: param.parameterized.Event) -> None:
        self.alpha_chart.show(self._alphas())
        if self.follower.running:
            self._hint("warning", "Training settings changed. **Reset** to rebuild the model with them (this "
                                  "stops the current run; its folder stays on disk).")
            return
        self.later(self._rebuild)  # the α chart follows each change at once; the model is rebuilt once they stop

    def _hint(self, kind: str, text: str) -> None:
        """A message about the settings (the page's notice is kept for the URL's)."""
        self.hint.object, self.hint.alert_type, self.hint.visible = text, kind, True

    def _alphas(self) -> np.ndarray:
        return np.array([a for a, _ in block_scales(self.shortcut, self.depth, self.alpha_min)], np.float32)

    def _rebuild(self) -> None:
        """A fresh, untrained model from the settings: its snapshot is drawn before any training."""
        self.hint.visible = False
        try:
            cfg = self.config()
            if cfg.data != self._data_cfg:  # same data, same arrays: the decision map then updates in place
                data = make_toy_data(cfg.data)
                self._x, self._y, self._data_cfg = data.x_train.numpy(), data.y_train.numpy(), cfg.data
        except (ConfigError, ValueError) as err:
            self.follower.status.error(f"Invalid settings: {err}")
            return
        self.follower.status.clear()
        if self.shortcut not in DECAYED and self.alpha_min < 1.0:
            self._hint("info", f"alpha_min has no effect with the {self.shortcut} schedule.")
        self.param.layer_range.bounds = (0, cfg.model.depth + 1)
        self.param.node_range.bounds = (0, cfg.model.width)
        self.layer_range = (min(self.layer_range[0], cfg.model.depth),
                            min(max(self.layer_range[1], 1), cfg.model.depth + 1))
        self.node_range = (min(self.node_range[0], cfg.model.width - 1),
                           min(max(self.node_range[1], 1), cfg.model.width))
        model = build_model(cfg)
        self.snapshot = {**nodes_snapshot(model), "step": np.int64(0)}
        if not self.similarity.collapsed:
            self._similarity_pipe.send(similarity_snapshot(model))
        else:
            self._similarity_pipe.send(None)
        self.alpha_chart.show(self._alphas())
        self.curves.clear()
        self._set_history([])
        self._draw()

    # -- actions ----------------------------------------------------------------------------------------------
    def _start(self, paused: bool) -> bool:
        live = [KINDS[k] for k in self.live_views]  # the kinds this page laid out a view for
        builders = {NODES: partial(nodes_snapshot, resolution=self._live_resolution()),
                    SIMILARITY: similarity_snapshot, **{k.name: k.builder for k in live}}
        job = self.follower.start(self.config(), paused=paused, on_demand=(NODES, SIMILARITY), builders=builders,
                                  cadence={NODES: (self.snapshot_every, 0.0), SIMILARITY: (0, 2.0),
                                           **{k.name: k.cadence for k in live}})
        if job is None:
            return False
        self.curves.clear()
        self._set_history([])
        self.follower.want(NODES)
        self.follower.want(SIMILARITY, not self.similarity.collapsed)
        return True

    def _live_resolution(self) -> int:
        """Grid points per axis of the run's node maps: twice the pixels a tile is drawn at in the current view, so
        every pixel on screen is a point of the map, between 24 and the paper's 50. A map's points cost the training
        child time at every snapshot (a forward pass over R² points of every layer) and the server bytes to forward:
        at the default view (13-pixel tiles) 26 points instead of 50 make a snapshot a quarter of the work."""
        view = self._view()
        tile = mosaic(self.snapshot, layers=view["layers"], nodes=view["nodes"], fit_width=view["fit_width"]).tile
        return int(np.clip(2 * tile, 24, RESOLUTION))

    # -- live updates -----------------------------------------------------------------------------------------
    def _set_history(self, steps: list[int]) -> None:
        """Snapshots received so far. The History slider counts snapshots back from the live one, so while it shows
        the live snapshot (0) only its range grows: the page never moves the slider, and a browser echoing an
        older position cannot take the page out of live mode."""
        self.history_steps = steps
        with param.edit_constant(self):
            self.param.history.bounds = (-max(1, len(steps) - 1), 0)
            if not steps:
                self.history = 0
        self.param.history.constant = len(steps) < 2

    def _show_history(self) -> None:
        """Give the History slider the snapshots received since the last poll. Once a poll, not once a snapshot: a
        new range at every frame cost the server about 3 ms and the browser a redraw of the slider, per frame."""
        n = len(self.history_steps)
        if self.param.history.bounds != (-max(1, n - 1), 0) or self.param.history.constant != (n < 2):
            self._set_history(self.history_steps)

    def _new_snapshot(self, snapshot: dict[str, np.ndarray]) -> None:
        self.history_steps.append(int(snapshot["step"]))  # the slider's range follows at the next poll
        if self.history == 0:  # live; otherwise the replayed snapshot stays on screen
            self.snapshot = snapshot
            self._draw()

    def _new_live(self, kind: str, snapshot: dict[str, np.ndarray]) -> None:
        """Draw a registered kind's snapshot in its view, or say why it is not drawn (the one on screen stays)."""
        try:
            check_snapshot(kind, snapshot)
        except SnapshotError as err:
            self.follower.status.error(f"A {kind} snapshot is not drawn: {err}")
            return
        self.live_views[kind].show(snapshot, int(snapshot["step"]), (self._x, self._y))

    def _new_similarity(self, arrays: dict[str, np.ndarray]) -> None:
        self._similarity_pipe.send(arrays)

    def _similarity_toggled(self, event: param.parameterized.Event) -> None:
        self.follower.want(SIMILARITY, not event.new)
        if not event.new and self.job is None:
            self._rebuild()

    @param.depends(*VIEW, watch=True)
    def _draw(self) -> None:
        if self.snapshot is not None:
            self.grid.show(self.snapshot, **self._view())
            self.decision.show(self.snapshot["decision"], int(self.snapshot["step"]), self._x, self._y,
                               float(self.snapshot.get("limit", 1.0)))

    def _view(self) -> dict[str, Any]:
        return {"layers": tuple(int(v) for v in self.layer_range), "nodes": tuple(int(v) for v in self.node_range),
                "normalize": self.normalize, "points": (self._x, self._y), "fit_width": self.grid_width}

    @param.depends("history", watch=True)
    def _replay(self) -> None:
        """Show a recorded snapshot: the newest one on disk at or before the chosen snapshot's step."""
        if self.job is None or not self.history_steps:
            return
        if self.history == 0:
            latest = self.job.latest(NODES)
            if latest is not None:
                self.snapshot = latest[1]
                self._draw()
            return
        wanted = self.history_steps[max(0, len(self.history_steps) - 1 + self.history)]
        on_disk = [v for v in self.job.run.snapshot_versions(NODES) if v <= wanted]
        found = None
        with contextlib.suppress(OSError):  # a snapshot being replaced: the one on screen stays
            found = load_saved(self.job.run, NODES, on_disk[-1]) if on_disk else None
        if found is not None:
            self.snapshot = found[1]
            self._draw()

    def _similarity_view(self, key: str, view, data: dict[str, np.ndarray] | None) -> hv.Image:
        if data is None:  # nothing computed yet (the view was closed): a neutral picture of the right size
            return view(np.zeros((self.depth + 1, self.depth + 1), np.float32))
        return view(data[key])

    # -- export -----------------------------------------------------------------------------------------------
    def grid_png(self) -> io.BytesIO:
        """The current node grid (mosaic of tiles) as a PNG."""
        view = self._view()
        m = mosaic(self.snapshot, layers=view["layers"], nodes=view["nodes"], normalize=view["normalize"],
                   fit_width=view["fit_width"])
        out = io.BytesIO()
        Image.fromarray(m.rgba(), "RGBA").save(out, format="PNG")
        out.seek(0)
        return out

    def plots_html(self) -> io.BytesIO:
        """The grid, decision map and α chart of the current snapshot as one standalone HTML file."""
        decision = decision_overlay(self.snapshot["decision"], int(self.snapshot["step"]), self._x, self._y,
                                    float(self.snapshot.get("limit", 1.0)), max_points=self.decision.max_points)
        layout = (node_grid(self.snapshot, **self._view()) + decision + alpha_bars(self._alphas())).cols(1)
        html = file_html(hv.render(layout, backend="bokeh"), INLINE, "Residual Lab Playground")
        return io.BytesIO(html.encode())

    def snapshot_npz(self) -> io.BytesIO:
        """The snapshot on screen, as an npz."""
        return self.npz(self.snapshot)

    def exports(self) -> list[Export]:
        return [("Grid PNG", self.grid_png, "node_grid.png"), ("Plots HTML", self.plots_html, "playground.html"),
                ("Snapshot npz", self.snapshot_npz, "snapshot.npz"), ("Config YAML", self.config_yaml, "config.yaml")]

    def settings_json(self) -> str:
        """The page's settings (what the URL query carries), as JSON."""
        return json.dumps({p: getattr(self, p) for p in self.url_parameters})

    # -- layout -----------------------------------------------------------------------------------------------
    def _messages(self) -> list[pn.viewable.Viewable]:
        return [*super()._messages(), self.hint]

    def _group_parameters(self, group: str, names: list[str]) -> list[str]:
        return names + (["history"] if group == "View" else [])

    def views(self) -> pn.viewable.Viewable:
        """The grid, decision map, α chart, exports, curves and layer similarity (the served page's main area)."""
        return self._views
