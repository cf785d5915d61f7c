"""The Rank page: an α_min sweep of *Residual Connections Harm Generative Representation Learning*, live.

Several residual MLPs that differ only in α_min train as one batched computation (a
:class:`~lab.jobs.sweep_job.SweepJob`), and the page redraws, per member and per layer, the effective rank of the
features and linear-probe accuracy, and across members their correlation. The task is the paper's point: ``classify``
(a toy set's two classes) is the supervised analogue of its Figure 9; ``masked`` (reconstruct hidden pixels of the
digits) and ``denoise`` (predict the noise of noised digits) are the generative ones it is about
(:mod:`lab.train.tasks`). A generative sweep has the paper's structure by default (``structure=unet``, the lab's toy
MAE of ``configs/toy_mae_digits.yaml``): the ``depth`` blocks are an encoder whose shortcuts decay, half as many
decoder blocks keep α = 1, U-Net skips join them, and the probes read the encoder's output; ``no_skips`` is
Table 3a's ablation (the same model without the skips) and ``no_decoder`` the residual MLP decaying to its output.
Before a sweep starts, the untrained members are drawn. A member that diverges or does not learn is named, never
plotted as if it had.

**Analyse a checkpoint** (the sidebar's last card) measures a network of your own layer by layer — rank (Eq. 6 and
effective rank), a ridge probe's accuracy and its re-transformation — from its weights file on the server
(:class:`~lab.ui.views.checkpoint_source.CheckpointSource`), drawn above the sweep's views
(:class:`~lab.ui.views.layer_profile.LayerProfileViews`).
"""

from __future__ import annotations

import io
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import panel as pn
import param
import yaml

from lab.analysis.embed import umap_embed
from lab.config import PIXEL_TASKS, ConfigError, ExperimentConfig, apply_overrides, to_dict
from lab.jobs.manager import JobManager
from lab.nn.mlp import ACTIVATIONS
from lab.reports.lenses import Analysis
from lab.reports.sweep_snapshot import rank_preview
from lab.runfolder.layout import RunState
from lab.snapshots.kinds import RANK
from lab.ui.pages.knobs import Knob, bounded_text, config_overrides, knob_class, toy_data_knobs
from lab.ui.pages.training import Export, TrainingPage
from lab.ui.text import md
from lab.ui.views.checkpoint_source import CheckpointSource
from lab.ui.views.layer_profile import LayerProfileViews
from lab.ui.views.live_rank import MEASURES, RankViews
from lab.ui.views.task_panel import TaskPanel

SCHEDULES = ("linear", "paper_eq5", "scaled_both", "scaled_branch")
STRUCTURES = {"unet": {"unet_skips": True}, "no_skips": {"unet_skips": False}, "no_decoder": None}
"""A generative sweep's model: with a decoder of half the encoder's depth and U-Net skips or none, or no decoder."""
MAX_MEMBERS = 16
_UMAP = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lab-umap")  # one fit at a time, off the UI thread


def parse_alpha_mins(text: str, most: int = MAX_MEMBERS) -> list[float]:
    """``"1.0, 0.9, 0.8"`` → ``[1.0, 0.9, 0.8]``.

    Raises:
        ValueError: not numbers, outside [0, 1], repeated, or fewer than 2 or more than ``most``.
    """
    try:
        values = [float(v) for v in text.replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"alpha_mins must be numbers separated by commas; got {text!r}") from None
    if not 2 <= len(values) <= most:
        raise ValueError(f"alpha_mins needs 2 to {most} values; got {len(values)}")
    bad = [v for v in values if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"alpha_mins must be in [0, 1]; got {bad[0]}")
    if len(set(values)) != len(values):
        raise ValueError("alpha_mins has a repeated value")
    return values


_DATA = toy_data_knobs("data_seed")
_DATA["n"] = Knob(param.Integer(default=16384, bounds=(100, 16384), doc="samples (half per class)"), "Data", "data.n",
                  to_config=lambda v, page: v + v % 2)

KNOBS: dict[str, Knob] = {
    "alpha_mins": Knob(bounded_text("1.0, 0.9, 0.8, 0.7, 0.6, 0.5", doc="one member per α_min (2 to 16, "
                                                                       "comma-separated)"), "Sweep"),
    "task": Knob(param.Selector(default="classify", objects=["classify", *PIXEL_TASKS], doc="classify: the toy set's "
                                "two classes; masked: reconstruct hidden pixels of the digits (the MAE analogue); "
                                "denoise: predict the noise of noised digits (the diffusion analogue). Give these a "
                                "width of 64 or more: a narrower stream cannot carry the 64 pixels they output"),
                 "Sweep",
                 "train.task"),
    "mask_ratio": Knob(param.Number(default=0.5, bounds=(0.05, 0.95), step=0.05, doc="masked: share of each digit's "
                                    "pixels hidden"), "Sweep", "train.mask_ratio"),
    "structure": Knob(param.Selector(default="unet", objects=list(STRUCTURES), doc="generative tasks: unet: an "
                                     "encoder of `depth` decayed blocks, a decoder of depth/2 blocks at α = 1 and "
                                     "U-Net skips, probed at the encoder's output (the paper's §3.2); no_skips: "
                                     "Table 3a's ablation, without the skips; no_decoder: the MLP decays to its "
                                     "output, which must carry every pixel"), "Sweep"),
    "schedule": Knob(param.Selector(default="linear", objects=list(SCHEDULES), doc="α over depth: linear or the "
                                    "paper's Eq. 5; scaled_both / scaled_branch are Table 3b's controls"), "Sweep",
                     "model.shortcut"),
    "zero_init": Knob(param.Boolean(default=False, doc="zero-initialise every branch's output layer"), "Sweep",
                      "model.zero_init"),
    **_DATA,
    "depth": Knob(param.Integer(default=32, bounds=(2, 64), doc="residual blocks L"), "Model", "model.depth"),
    "width": Knob(param.Integer(default=32, bounds=(2, 128), doc="width H"), "Model", "model.width"),
    "activation": Knob(param.Selector(default="gelu", objects=list(ACTIVATIONS)), "Model", "model.activation"),
    "init_seed": Knob(param.Integer(default=0, bounds=(0, 2**31 - 1), doc="initialisation seed"), "Model",
                      "model.seed"),
    "optimizer": Knob(param.Selector(default="adam", objects=["adam", "adamw", "sgd"]), "Training",
                      "train.optimizer"),
    "lr": Knob(param.Number(default=0.003, bounds=(1e-5, 1.0), step=0.001, doc="learning rate"), "Training",
               "train.lr"),
    "batch_size": Knob(param.Integer(default=256, bounds=(8, 4096)), "Training", "train.batch_size"),
    "epochs": Knob(param.Integer(default=10, bounds=(1, 1000)), "Training", "train.epochs"),
    "every_s": Knob(param.Number(default=1.0, bounds=(0.1, 60.0), step=0.1, doc="seconds of training between rank "
                                 "snapshots"), "Training"),
    "measure": Knob(param.Selector(default="effective_rank", objects=list(MEASURES), doc="effective_rank: exp(H) "
                                   "(Roy & Vetterli); eq6_entropy: the entropy H the paper's Eq. 6 reports"),
                    "View", training=False),
    "embedding": Knob(param.Selector(default="pca", objects=["pca", "umap"], doc="final features: PCA (live) or "
                                     "UMAP (computed on demand, in the background)"), "View", training=False),
}
FIXED = {"train.eval_every": 25, "train.log_every": 5}


class RankPage(knob_class("_RankKnobs", KNOBS, TrainingPage)):
    """Sweep α_min and watch rank, probe accuracy and their correlation evolve while the members train.

    Attributes:
        rank: the sweep's views (:class:`~lab.ui.views.live_rank.RankViews`).
    """

    title = "Rank"
    knobs = KNOBS
    changed_note = ("Settings changed. **Reset** to sweep with them (this stops the current sweep; its folders stay on "
                    "disk).")
    actions = ("play", "reset")
    open_groups = (0, 4)

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(manager, **params)
        self.rank = RankViews()
        self._umap: Future | None = None
        self.follower.on_snapshot(RANK, self._new_snapshot)
        self.layers = LayerProfileViews()
        self.checkpoint = CheckpointSource(self.follower.manager.store.root, on_result=self._show_checkpoint,
                                           analyses=("rank", "retransformation"), session=self.tasks)
        self._main = pn.Column(self.rank.layout, self._downloads())  # a checkpoint's layers go on top once analysed
        self.follower.add_views(self._main)
        self.preview = TaskPanel("The untrained members are drawn once the preview has run.", session=self.tasks)
        self.preview.first(self._rebuild)  # served, once the page is drawn; in a notebook, before the cell returns

    # -- configuration ----------------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The members' shared experiment (α_min is swept over :meth:`alpha_min_values`). A generative task learns
        the digits (the toy set's settings then do not apply; the data seed still splits them)."""
        overrides = config_overrides(self, KNOBS)
        if self.task == "classify":
            return apply_overrides(ExperimentConfig(), {"name": f"rank-{self.dataset}", "model.name": "residual_mlp",
                                                        **overrides, **FIXED})
        overrides = {k: v for k, v in overrides.items() if not k.startswith("data.") or k == "data.seed"}
        structure = STRUCTURES[self.structure]
        if structure is not None:
            overrides.update({"model.decoder_depth": max(1, self.depth // 2),
                              **{f"model.{k}": v for k, v in structure.items()}})
        return apply_overrides(ExperimentConfig(), {"name": f"rank-{self.task}-{self.structure}-digits",
                                                    "model.name": "residual_mlp", **overrides, "data.name": "digits",
                                                    **FIXED})

    def alpha_min_values(self) -> list[float]:
        return parse_alpha_mins(self.alpha_mins)

    def _rebuild(self) -> None:
        """The untrained members, drawn before any training."""
        self.notice.visible = False
        try:
            cfg, values = self.config(), self.alpha_min_values()
        except (ConfigError, ValueError) as err:
            self.follower.status.error(f"Invalid settings: {err}")
            return
        self.follower.status.clear()
        self.preview.start("Preview of the untrained members", rank_preview, cfg, values, replace=True,
                           on_result=self._show_preview)

    def _show_preview(self, snapshot: dict[str, np.ndarray]) -> None:
        """The untrained members, unless a sweep has started meanwhile (its snapshots are drawn instead)."""
        if self.follower.running:
            return
        with self.follower.drawing():
            self.rank.clear()
            self.rank.show(snapshot)

    # -- actions ----------------------------------------------------------------------------------------------
    def _start(self, paused: bool) -> bool:
        self.preview.cancel()
        try:
            cfg, values = self.config(), self.alpha_min_values()
        except (ConfigError, ValueError) as err:
            self.follower.status.error(f"Cannot start: {err}")
            return False
        if self.follower.start_sweep(cfg, {"model.alpha_min": values}, cadence=(0, self.every_s),
                                     paused=paused) is None:
            return False
        self.rank.clear()
        return True

    # -- live updates -----------------------------------------------------------------------------------------
    def _new_snapshot(self, snapshot: dict[str, np.ndarray]) -> None:
        self.rank.show(snapshot)
        if self.embedding == "umap":
            self._start_umap()
        failed = self.rank.failed()
        finished = self.job is not None and self.job.status().get("state") in (RunState.COMPLETED, RunState.STOPPED)
        if failed and (finished or any("diverged" in f for f in failed)):
            self.say("warning", "Not every member learned, so their points say nothing about rank: "
                                + "; ".join(failed) + ". Try a smaller learning rate, more epochs or zero_init.")

    def poll(self) -> bool:
        changed = super().poll()
        changed = self.preview.poll() or changed
        changed = self.checkpoint.poll() or changed
        return self._draw_umap() or changed

    def _show_checkpoint(self, result: Analysis) -> None:
        if self.layers.layout not in self._main.objects:  # figures join the page with their data, never empty
            self._main.insert(0, self.layers.layout)
        with self.follower.drawing():
            self.layers.show(result.network or result.run.id, result.rank, result.retransformation)

    @param.depends("measure", watch=True)
    def _measure_changed(self) -> None:
        self.rank.set_measure(self.measure)

    @param.depends("embedding", watch=True)
    def _embedding_changed(self) -> None:
        if self.embedding == "umap":
            self._start_umap()
        self.rank.set_embedding(self.embedding)

    def _start_umap(self) -> None:
        """Fit UMAP to every member's final features in the background (cached: a snapshot seen before is free)."""
        snapshot = self.rank.snapshot
        if snapshot is None or (self._umap is not None and not self._umap.done()):
            return
        features = snapshot["final_features"]
        self._umap = _UMAP.submit(lambda: {k: umap_embed(features[k]) for k in range(len(features))})
        self._umap.step = int(snapshot["step"])
        self._umap.add_done_callback(lambda _: self._schedule_umap_draw())

    def _schedule_umap_draw(self) -> None:
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(self._draw_umap)

    def _draw_umap(self) -> bool:
        future = self._umap
        snapshot = self.rank.snapshot
        if future is None or not future.done() or snapshot is None or getattr(future, "drawn", False):
            return False
        future.drawn = True
        if future.exception() is not None:
            self.say("danger", f"UMAP failed: {md(future.exception())}")
            return False
        if future.step == int(snapshot["step"]) and self.embedding == "umap":
            self.rank.set_embedding("umap", future.result())
            return True
        return False

    # -- export -----------------------------------------------------------------------------------------------
    def snapshot_npz(self) -> io.BytesIO:
        """The snapshot on screen, as an npz."""
        return self.npz(self.rank.snapshot or {})

    def config_yaml(self) -> io.BytesIO:
        """The sweep's shared experiment and the values it sweeps, as YAML."""
        text = yaml.safe_dump({"sweep": {"model.alpha_min": self.alpha_min_values()}, **to_dict(self.config())},
                              sort_keys=False)
        return io.BytesIO(text.encode())

    def exports(self) -> list[Export]:
        return [("Snapshot npz", self.snapshot_npz, "rank.npz"), ("Config YAML", self.config_yaml, "sweep.yaml")]

    # -- layout -----------------------------------------------------------------------------------------------
    def _messages(self) -> list[pn.viewable.Viewable]:
        return [*super()._messages(), self.preview]

    def _cards(self) -> list[pn.viewable.Viewable]:
        return [self.checkpoint.card()]

    def views(self) -> pn.viewable.Viewable:
        """Rank, probe accuracy, their correlation, embeddings and accuracies (the served page's main area)."""
        return self._main
