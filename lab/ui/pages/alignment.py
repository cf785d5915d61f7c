"""The Alignment page: *Residual Alignment: Uncovering the Mechanisms of Residual Networks* live on a training ResNet.

A fully-connected or convolutional ResNet trains on an image set (digits ship with the lab; other sets are read
from the server's data folders) and the page redraws RA1–RA4 and neural collapse as it learns. The paper's central
contrast is one switch away: the same network without skip connections, trained in lockstep beside it (same
initialisation seed, same batches, same step), drawn in a second column.

Snapshots are on demand: the job builds the next one (:func:`lab.snapshots.builders.alignment_builder`, on the training
thread between steps) only after the page has drawn the last and at least ``every`` steps later. Before training,
the untrained networks' snapshots come from a bounded child process (:func:`lab.snapshots.builders.alignment_preview` in
a :class:`~lab.ui.views.task_panel.TaskPanel`, with its progress and Cancel): the page answers at once and the
preview arrives after. Served, the page's first document holds its sidebar and no figure: the figures join it once
the browser has drawn that, and the preview starts then. Sizes a link asks for beyond :data:`LINK_LIMITS` are
clamped, and the page says so.

The analysis starts from the paper's choices: K = 30 singular triplets per block (its Fig. 2; fewer when a block
is narrower), the 1/σ₁ line fitted from block 5 on (its Fig. 4b), and trajectories projected on two random
Gaussian directions. Each view is one row: the network with skips beside the one without, at fixed sizes.

**Analyse a checkpoint** (the sidebar's last card) puts a network of your own under the same lens: a timm or
torchvision ResNet or ViT, or a lab model, with its weights file from the server's folders
(:class:`~lab.ui.views.checkpoint_source.CheckpointSource`). Its analysis replaces the left column's views until
**Reset**; its run folder stays on disk, where the Runs page lists it.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import panel as pn
import param
from bokeh.embed import file_html
from bokeh.layouts import gridplot
from bokeh.resources import INLINE

from lab.analysis.residual_alignment import PAPER_K, RA4_FIT_START
from lab.config import ConfigError, ExperimentConfig, ModelConfig, apply_overrides
from lab.data.images import IMAGE_DATASETS
from lab.data.roots import resolve_data_path
from lab.jobs.bounded import TaskFailed
from lab.jobs.manager import JobManager
from lab.nn.registry import list_models, model_info, model_parameters
from lab.reports.lenses import Analysis
from lab.snapshots.builders import alignment_builder_of, alignment_preview
from lab.snapshots.kinds import ALIGNMENT
from lab.ui.follower import JobFollower
from lab.ui.pages.knobs import Knob, bounded_text, config_overrides, knob_class, view_names
from lab.ui.pages.training import Export, TrainingPage
from lab.ui.text import markdown_pane
from lab.ui.views.checkpoint_source import CheckpointSource
from lab.ui.views.live_alignment import VIEWS, AlignmentViews
from lab.ui.views.live_curves import LiveCurves
from lab.ui.views.task_panel import TaskPanel

CONV_TYPES = {"conv": "conv_resnet", "conv_two_stage": "conv_resnet"}
"""The convolutional presets: ``depth`` and ``width`` set their stages' blocks and channels."""


def model_types() -> dict[str, str]:
    """Choice → registered model: ``fc`` (Types 1 and 4), the convolutional presets, then every other classifier of
    the ``resnet`` family whose builder takes ``depth`` and ``width`` (the paper's types, a plugin's models)."""
    choices = {"fc": "fc_resnet", **CONV_TYPES}
    for name in list_models():
        info = model_info(name)
        if info.family == "resnet" and info.task == "classify" and name not in choices.values() and \
                {"depth", "width"} <= set(model_parameters(name)[0]):
            choices[name] = name
    return choices


MODEL_TYPES = model_types()

KNOBS: dict[str, Knob] = {
    "dataset": Knob(param.Selector(default="digits", objects=list(IMAGE_DATASETS),
                                   doc="image set (digits ship with the lab; the others need a data folder)"),
                    "Data", "data.name"),
    "data_folder": Knob(bounded_text(doc="folder of the data set, inside the server's data folders (LAB_DATA_DIRS)"),
                        "Data", "data.root",
                        to_config=lambda v, page: str(resolve_data_path(v)) if v.strip() else ""),
    "classes": Knob(param.Integer(default=0, bounds=(0, 100), doc="first N classes only (0 = all)"), "Data",
                    "data.classes"),
    "max_per_class": Knob(param.Integer(default=0, bounds=(0, 100_000), doc="at most N training images per class "
                                                                           "(0 = all)"), "Data", "data.max_per_class"),
    "model_type": Knob(param.Selector(default="fc", objects=list(MODEL_TYPES),
                                      doc="fc: Types 1 and 4; conv: Types 2 and 5; conv_two_stage: Type 3; "
                                          "then the resnet family's other registered models"), "Model",
                       "model.name", to_config=lambda v, page: MODEL_TYPES[v]),
    "depth": Knob(param.Integer(default=8, bounds=(1, 32), doc="residual blocks L (two stages: half each)"),
                  "Model"),
    "width": Knob(param.Integer(default=128, bounds=(4, 1024), doc="FC: width D; conv: channels of the first "
                                                                  "stage"), "Model"),
    "skips": Knob(param.Boolean(default=True, doc="skip connections (off: shortcut 'none', Types 4b and 5b)"),
                  "Model", "model.shortcut", to_config=lambda v, page: "identity" if v else "none"),
    "contrast": Knob(param.Boolean(default=True, doc="also train the same network with the skips switched, in "
                                                     "lockstep, side by side"), "Model"),
    "init_seed": Knob(param.Integer(default=0, bounds=(0, 2**31 - 1), doc="initialisation seed"), "Model",
                      "model.seed"),
    "optimizer": Knob(param.Selector(default="sgd", objects=["sgd", "adam", "adamw"]), "Training", "train.optimizer"),
    "lr": Knob(param.Number(default=0.05, bounds=(1e-5, 1.0), step=0.005, doc="initial learning rate"), "Training",
               "train.lr"),
    "lr_schedule": Knob(param.Selector(default="cosine", objects=["constant", "cosine"]), "Training",
                        "train.lr_schedule"),
    "weight_decay": Knob(param.Number(default=0.01, bounds=(0.0, 0.5), step=0.005, doc="the paper: 1e-2 or 5e-2 "
                                      "for FC models, 1e-1 for conv"), "Training", "train.weight_decay"),
    "batch_size": Knob(param.Integer(default=128, bounds=(8, 1024)), "Training", "train.batch_size"),
    "epochs": Knob(param.Integer(default=60, bounds=(1, 1000)), "Training", "train.epochs"),
    "stochastic_depth": Knob(param.Number(default=0.0, bounds=(0.0, 0.9), step=0.05, doc="probability of "
                                          "skipping a block's branch while training (the paper's Fig. 5: 0.3)"),
                             "Training", "train.drop_path_rate"),
    "k": Knob(param.Integer(default=PAPER_K, bounds=(1, 64), doc="singular vectors per block K (the paper: 10 to "
                                                                  "30, its Fig. 2: 30; at most the block's size)"),
              "Analysis"),
    "fit_from": Knob(param.Integer(default=RA4_FIT_START + 1, bounds=(1, 32), doc="RA4: the 1/σ₁ line is fitted "
                                   "from this block on (the paper's Fig. 4b: 5; a shallower network fits its last "
                                   "two)"), "Analysis"),
    "inputs": Knob(param.Integer(default=64, bounds=(4, 512), doc="test inputs analysed"), "Analysis"),
    "every": Knob(param.Integer(default=20, bounds=(1, 5000), doc="at least this many steps between snapshots"),
                  "Analysis"),
    "projection": Knob(param.Selector(default="gauss", objects=["gauss", "pca"], doc="RA1 plane: two random "
                                      "Gaussian directions (the paper's) or the top-2 principal ones"), "View",
                       training=False),
    "pair_i": Knob(param.Integer(default=1, bounds=(0, 31), doc="enlarged pair: Jacobian of block i"), "View",
                   training=False),
    "pair_j": Knob(param.Integer(default=0, bounds=(0, 31), doc="enlarged pair: basis of block j"), "View",
                   training=False),
}
VIEW = view_names(KNOBS)
LINK_LIMITS = {"width": 128, "depth": 16, "inputs": 64, "k": 30}
"""The most a link (the URL's query) may ask of each size: the untrained preview of two networks at these sizes took
10-15 s on two cores (the page's defaults, 8 blocks, 5-9 s). More can be set on the page itself; the preview then
runs longer, still in its bounded child."""
FIXED = {"train.momentum": 0.9, "train.log_every": 5}
COLUMN_PX = 500
"""Width of each run's column: its widest figure (frame, axes, legend or colour bar) fits; nothing is squeezed."""


class AlignmentPage(knob_class("_AlignmentKnobs", KNOBS, TrainingPage)):
    """Train a ResNet on images and watch Residual Alignment emerge, with and without skip connections.

    Shown as a notebook cell's value it is the whole page; served, the shell puts :meth:`controls` in the sidebar
    and :meth:`views` in the main area. Served, the page paints in parts: its sidebar and a placeholder first, its
    figures once the browser has drawn those (:meth:`_lay_out`), the untrained networks once their preview has run.

    Attributes:
        main, twin: the views of the configured network and of its switched-skips twin.
        curves, twin_curves: their loss and accuracy.
        checkpoint: the form of **Analyse a checkpoint**.
        twin_follower: follows the twin's job (the page's ``follower`` follows the main one).

    ``main``, ``twin``, their curves and ``checkpoint`` exist once the page is laid out: at once in a notebook or a
    script, served once the browser has drawn the sidebar.
    """

    title = "Alignment"
    knobs = KNOBS
    link_limits = LINK_LIMITS
    changed_note = ("Training settings changed. **Reset** to rebuild the networks with them (this stops the current "
                    "runs; their folders stay on disk).")

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(manager, **params)
        self.twin_follower = JobFollower(self.follower.manager)
        self.preview = TaskPanel("The untrained networks are drawn once the preview has run.", session=self.tasks)
        self._unbuildable: str | None = None  # why the last preview could not build the settings' networks
        self._twin_parts: list[pn.viewable.Viewable] = []  # what the contrast switch shows or hides
        self._laid_out = False  # whether the figures, curves and checkpoint form are made (:meth:`_lay_out`)
        self._views = pn.Column(markdown_pane("The views are laid out once the page has been drawn.",
                                              margin=(0, 10)))
        self._card = pn.Column(sizing_mode="stretch_width")  # the checkpoint form's card, once laid out
        self.follower.add_views(self._views)
        self.twin_follower.add_views(self._views)
        # served, once the page is drawn: the figures, then the preview; in a notebook, before the cell returns
        self.preview.first(self._rebuild)

    def _lay_out(self) -> None:
        """Make the figures, the curves and the checkpoint form, and put them on the page (once).

        They are most of what the page costs to show: 16 figures, some 860 Bokeh models, which the server makes
        and sends and the browser draws before anything else. So a served page's first document holds its sidebar
        and a placeholder only, and they are made at its first :meth:`_rebuild`, which :meth:`TaskPanel.first
        <lab.ui.views.task_panel.TaskPanel.first>` calls once the browser has drawn that; in a notebook or a script
        it calls it at once, and a notebook's output is rendered once, with them (see there why).
        """
        if self._laid_out:
            return
        self._laid_out = True
        self.main = AlignmentViews("with skips")
        self.twin = AlignmentViews("without skips")
        self.curves = LiveCurves(width=300, height=160)
        self.twin_curves = LiveCurves(width=300, height=160)
        self.checkpoint = CheckpointSource(self.follower.manager.store.root, on_result=self._show_checkpoint,
                                           session=self.tasks)
        self.follower.on_snapshot(ALIGNMENT, self.main.show)
        self.follower.on_metrics(self.curves.extend)
        self.twin_follower.on_snapshot(ALIGNMENT, self.twin.show)
        self.twin_follower.on_metrics(self.twin_curves.extend)
        self._view_changed()  # the view settings given before (the URL's, the constructor's)
        self._views[:] = [*self._rows(), self._downloads()]
        self._card[:] = [self.checkpoint.card()]

    # -- configuration ----------------------------------------------------------------------------------------
    def config(self, twin: bool = False) -> ExperimentConfig:
        """The experiment the settings describe; ``twin``: the same with the skips switched.

        Raises:
            ConfigError: an invalid combination (the message says which setting and why).
            PermissionError, FileNotFoundError: the data folder is outside the server's data folders or missing.
        """
        values = config_overrides(self, KNOBS)
        skips = self.skips != twin
        values["model.shortcut"] = "identity" if skips else "none"
        if self.model_type not in CONV_TYPES:  # depth blocks of width features
            values.update({"model.depth": self.depth, "model.width": self.width})
        else:  # conv blocks work at the input's resolution: digits stay 8 x 8
            stages = (self.depth,) if self.model_type == "conv" else (max(1, self.depth // 2),
                                                                       max(1, self.depth - self.depth // 2))
            channels = (self.width,) if len(stages) == 1 else (self.width, 2 * self.width)
            values.update({"model.depths": list(stages), "model.channels": list(channels),
                           "model.feature_size": None})
        values["train.droppath"] = "droppath" if self.stochastic_depth > 0 else "off"
        name = f"alignment-{self.dataset}-{'skips' if skips else 'noskips'}"
        base = ExperimentConfig(name=name, model=ModelConfig(name=MODEL_TYPES[self.model_type]))
        return apply_overrides(base, {**values, **FIXED})

    def _rebuild(self) -> None:
        """Untrained networks from the settings: their snapshots, computed in a bounded child, are drawn before any
        training (a newer preview replaces one still running). The first call lays the page out."""
        self._lay_out()
        try:
            cfgs = [self.config()] + ([self.config(twin=True)] if self.contrast else [])
        except (ConfigError, ValueError, PermissionError, FileNotFoundError) as err:
            self.follower.status.error(f"Cannot build these settings: {err}")
            return
        self.follower.status.clear()
        self.curves.clear()
        self.twin_curves.clear()
        for part in self._twin_parts:
            part.visible = self.contrast
        for views, c in zip((self.main, self.twin), cfgs, strict=False):
            views.set_label("with skips" if c.model.shortcut == "identity" else "without skips")
        self._unbuildable = None
        self.preview.start("Preview of the untrained networks", alignment_preview, cfgs, k=self.k,
                           inputs=self.inputs, fit_start=self.fit_from - 1, replace=True,
                           on_result=self._show_preview, on_failure=self._preview_failed)

    def _preview_failed(self, err: TaskFailed) -> None:
        """Settings whose networks or data could not be built are said in the status, and **Start** refuses them; a
        preview ended by a bound or cancelled says so in its panel, and training may still start."""
        if err.reason == "error":
            self._unbuildable = str(err)
            self.follower.status.error(f"Cannot build these settings: {err}")

    def _show_preview(self, result: dict[str, Any]) -> None:
        """The preview's snapshots, drawn unless a run has started meanwhile (its snapshots are drawn instead)."""
        if self.follower.running:
            return
        with self.follower.drawing():
            for views, snapshot in zip((self.main, self.twin), result["snapshots"], strict=False):
                if snapshot is not None:
                    views.show({**snapshot, "step": np.int64(0)})
        if self.k > result["k"]:
            self.say("info", f"K = {self.k} is more than the smallest block's size; using K = {result['k']}.")
        elif self.notice.object.startswith("K = "):  # a cap said for earlier settings
            self.notice.visible = False

    def _show_checkpoint(self, result: Analysis) -> None:
        """A checkpoint's analysis in the left column, alone (the twin's column hides until **Reset**)."""
        with self.follower.drawing():
            self.main.set_label(f"checkpoint {result.network or result.run.id}")
            self.main.show({**result.alignment, "step": np.int64(result.summary["step"])})
        for part in self._twin_parts:
            part.visible = False

    def _training_changed(self, *events: param.parameterized.Event) -> None:
        """As every training page's, once laid out; before (served: the URL's settings, applied before the browser
        has drawn the page), nothing: the first preview, at the page's load, reads them."""
        if self._laid_out:
            super()._training_changed(*events)

    # -- actions ----------------------------------------------------------------------------------------------
    def _start(self, paused: bool) -> bool:
        self._lay_out()
        self.curves.clear()
        self.twin_curves.clear()
        self.preview.cancel()
        try:
            cfg = self.config()
            if self._unbuildable is not None:
                raise ValueError(self._unbuildable)
        except (ConfigError, ValueError, PermissionError, FileNotFoundError) as err:
            self.follower.status.error(f"Cannot start: {err}")
            return False
        # the data's inputs are read in the training child, not here (K is capped there at the blocks' size)
        builder = alignment_builder_of(cfg, k=self.k, inputs=self.inputs, fit_start=self.fit_from - 1)
        kwargs = {"builders": {ALIGNMENT: builder}, "cadence": {ALIGNMENT: (self.every, 0.0)},
                  "on_demand": (ALIGNMENT,), "paused": paused}
        if not self.contrast:
            if self.follower.start(cfg, **kwargs) is None:
                return False
            self.follower.want(ALIGNMENT)
            return True
        cfgs = [cfg, self.config(twin=True)]
        jobs = self.follower.start_lockstep(cfgs, names=[c.name for c in cfgs], **kwargs)  # both or neither
        if jobs is None:
            return False
        self.twin_follower.follow(jobs[1])
        for follower in self.followers:
            follower.want(ALIGNMENT)
        return True

    @property
    def followers(self) -> tuple[JobFollower, ...]:
        return (self.follower, self.twin_follower)

    def poll(self) -> bool:
        """Pull what is new from the jobs, the preview and the checkpoint's analysis (a served page's periodic
        callbacks do each; a notebook or a test calls this)."""
        changed = super().poll()
        changed = self.preview.poll() or changed
        if self._laid_out:
            changed = self.checkpoint.poll() or changed
        return changed

    # -- view settings ----------------------------------------------------------------------------------------
    @param.depends(*VIEW, watch=True)
    def _view_changed(self) -> None:
        if not self._laid_out:  # the views take these settings when they are made
            return
        for views in (self.main, self.twin):
            views.set_projection(self.projection)
            views.set_pair(self.pair_i, self.pair_j)

    # -- export -----------------------------------------------------------------------------------------------
    def snapshot_npz(self) -> io.BytesIO:
        """The snapshots on screen (the twin's keys prefixed ``twin_``), as one npz."""
        arrays = dict(self.main.snapshot or {})
        if self.contrast and self.twin.snapshot is not None:
            arrays.update({f"twin_{k}": v for k, v in self.twin.snapshot.items()})
        return self.npz(arrays)

    def plots_html(self) -> io.BytesIO:
        """Every view of both columns as one standalone HTML file (scripts inlined: it opens offline)."""
        rows = []
        for shown in [self.main] + ([self.twin] if self.contrast else []):
            if shown.snapshot is None:
                continue
            v = AlignmentViews(shown.label)  # new figures: those on screen belong to the page's document
            v.projection, v.pair = shown.projection, shown.pair
            v.show(shown.snapshot)
            rows.append([v.trajectories, v.grid, v.pair_figure, v.spectrum, v.ra4, v.collapse])
        html = file_html(gridplot(rows), INLINE, "Residual Lab: Residual Alignment")
        return io.BytesIO(html.encode())

    def exports(self) -> list[Export]:
        return [("Plots HTML", self.plots_html, "alignment.html"),
                ("Snapshots npz", self.snapshot_npz, "alignment.npz"), ("Config YAML", self.config_yaml, "config.yaml")]

    # -- layout -----------------------------------------------------------------------------------------------

    def _rows(self) -> list[pn.viewable.Viewable]:
        """One row per view, the run with skips on the left and its twin on the right, each in a column of
        :data:`COLUMN_PX` (the same view of both runs at the same place, at full size: never squeezed)."""

        def pair(left: pn.viewable.Viewable, right: pn.viewable.Viewable) -> pn.Row:
            box = pn.Column(right, width=COLUMN_PX)
            self._twin_parts.append(box)
            return pn.Row(pn.Column(left, width=COLUMN_PX), box)

        heads = pair(pn.Column(self.main.heading, self.main.summary), pn.Column(self.twin.heading,
                                                                                self.twin.summary))
        # each run's first figure paces its snapshots: the next is made once the browser has drawn the last (on screen)
        first, *rest = VIEWS
        views = [pair(self.follower.pace(self.main.panes[first]), self.twin_follower.pace(self.twin.panes[first])),
                 *(pair(self.main.panes[name], self.twin.panes[name]) for name in rest)]
        curves = [pair(a, b) for a, b in zip(self.curves.pane, self.twin_curves.pane, strict=True)]
        return [heads, *views, *curves]

    def _messages(self) -> list[pn.viewable.Viewable]:
        return [*super()._messages(), self.preview]

    def _cards(self) -> list[pn.viewable.Viewable]:
        return [self._card]

    def views(self) -> pn.viewable.Viewable:
        """RA1–RA4, neural collapse and the curves of each run (the served page's main area)."""
        return self._views
