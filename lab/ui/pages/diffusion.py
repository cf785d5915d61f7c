"""The Diffusion page: Table 4 of *Residual Connections Harm Generative Representation Learning* at toy scale, live.

One U-ViT per α_min (default 1.0, 0.8, 0.7, 0.6: the paper's 1.0 → 0.7 and one beyond) learns to generate the
digits by ε-prediction, all in lockstep (:meth:`~lab.jobs.manager.JobManager.start_lockstep`: the same step at every
moment, one job slot between them). Each is an ordinary run folder written by the loader engine: at every evaluation
a grid of samples, digits-FD (:mod:`lab.analysis.frechet`) and linear probes over (block, noise level); the page
draws them as they arrive (:class:`~lab.ui.views.live_diffusion.DiffusionViews`). Any run can be opened later on the
Runs page, resumed, sampled (``python -m lab sample``) or measured (``python -m lab fid``).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pandas as pd
import panel as pn
import param
import yaml

from lab.config import ConfigError, ExperimentConfig, ModelConfig, TrainConfig, apply_overrides, to_dict
from lab.jobs.manager import JobManager
from lab.nn.vit_block import sublayer_scales
from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, read_json, read_picture
from lab.train.build import raw_images
from lab.ui.follower import JobFollower
from lab.ui.pages.knobs import Knob, bounded_text, config_overrides, knob_class
from lab.ui.pages.rank import parse_alpha_mins
from lab.ui.pages.training import Export, TrainingPage
from lab.ui.views.live_diffusion import DiffusionViews

MAX_MEMBERS = 6
"""U-ViTs one page trains at once (they share the machine's cores)."""
SIZES = {"uvit_tiny": "tiny: 64 wide, 7 blocks (a laptop)", "uvit_small": "small: 512 wide, 13 blocks (CIFAR's; a GPU)"}
"""The registered U-ViTs of pixels (``uvit_mid`` models VAE latents: ``configs/uvit_mid_in100_latent.yaml``)."""
SCHEDULES = ("sublayer", "linear", "paper_eq5", "constant")
"""The decayed α schedules (``sublayer``, α per residual sub-layer to the end of the decoder, is the paper's §5)."""

KNOBS: dict[str, Knob] = {
    "alpha_mins": Knob(bounded_text("1.0, 0.8, 0.7, 0.6", doc=f"one U-ViT per α_min (2 to {MAX_MEMBERS}, "
                                                              "comma-separated)"), "Sweep"),
    "schedule": Knob(param.Selector(default="sublayer", objects=list(SCHEDULES), doc="α over depth: sublayer is the "
                                    "paper's (per residual sub-layer, 1 → α_min at the decoder's last)"), "Sweep",
                     "model.shortcut"),
    "conditional": Knob(param.Boolean(default=False, doc="class-conditional (label dropout 0.1); the probe reads the "
                                      "features with the null class"), "Sweep", "model.num_classes",
                        to_config=lambda v, page: 10 if v else 0),
    "size": Knob(param.Selector(default="uvit_tiny", objects=list(SIZES), doc="; ".join(SIZES.values())), "Model",
                 "model.name"),
    "init_seed": Knob(param.Integer(default=0, bounds=(0, 2**31 - 1), doc="initialisation seed"), "Model",
                      "model.seed"),
    "image_size": Knob(param.Selector(default=8, objects=[8, 16], doc="side of the digits (scikit-learn's are 8 × 8; "
                                      "16 is them enlarged)"), "Data", "data.image_size"),
    "data_seed": Knob(param.Integer(default=0, bounds=(0, 2**31 - 1), doc="seed of the train/test split"), "Data",
                      "data.seed"),
    "lr": Knob(param.Number(default=2e-3, bounds=(1e-5, 1e-1), step=1e-4, doc="AdamW learning rate (after warmup)"),
               "Training", "train.lr"),
    "batch_size": Knob(param.Integer(default=128, bounds=(8, 1024)), "Training", "train.batch_size"),
    "steps": Knob(param.Integer(default=1800, bounds=(10, 200_000), doc="training steps of every U-ViT"), "Training",
                  "train.max_steps"),
    "every_epochs": Knob(param.Integer(default=15, bounds=(1, 1000), doc="epochs between evaluations (samples, "
                                       "digits-FD, probes)"), "Training", "train.probe_every"),
    "fd_samples": Knob(param.Integer(default=200, bounds=(0, 5000), doc="samples per digits-FD (0: none)"),
                       "Training", "train.fd_samples"),
    "sample_steps": Knob(param.Integer(default=20, bounds=(2, 1000), doc="probability-flow ODE steps per sample"),
                         "Training", "train.sample_steps"),
    "probe_samples": Knob(param.Integer(default=500, bounds=(50, 5000), doc="images of each split the probes read "
                                        "(more: steadier accuracies, slower evaluations)"), "Training",
                          "train.probe_samples"),
}
FIXED = {"data.name": "digits", "data.train_fraction": 0.9, "data.workers": 0, "train.task": "diffusion",
         "train.optimizer": "adamw", "train.betas": [0.99, 0.999], "train.weight_decay": 0.03,
         "train.lr_schedule": "warmup_constant", "train.warmup_steps": 200, "train.epochs": 100_000,
         "train.ema": 0.995, "train.samples": 36, "train.sampler": "ode", "train.log_every": 20}
"""The rest of ``configs/uvit_tiny_digits.yaml`` (the U-ViT reference's optimiser; 36 samples per grid)."""


class DiffusionPage(knob_class("_DiffusionKnobs", KNOBS, TrainingPage)):
    """Train one U-ViT per α_min in lockstep and watch samples, digits-FD and probes evolve.

    Attributes:
        diffusion: the views (:class:`~lab.ui.views.live_diffusion.DiffusionViews`).
        members: one follower per U-ViT of the current run (the page's ``follower`` follows the first).
    """

    title = "Diffusion"
    knobs = KNOBS
    changed_note = ("Settings changed. **Reset** to train with them (this stops the current runs; their folders stay "
                    "on disk).")
    actions = ("play", "step", "reset")
    open_groups = (0, 3)

    def __init__(self, manager: JobManager | None = None, **params: Any) -> None:
        super().__init__(manager, **params)
        self.diffusion = DiffusionViews()
        self.members: list[JobFollower] = [self.follower]
        self._statuses = pn.Column(self.follower, sizing_mode="stretch_width")
        self._main = pn.Column(self.diffusion.layout, self._downloads())
        self.follower.add_views(self._main)
        self.follower.on_metrics(lambda records: self._new_records(0, records))
        self._rebuild()

    # -- configuration ----------------------------------------------------------------------------------------
    def config(self) -> ExperimentConfig:
        """The U-ViTs' shared experiment (α_min is set per member, :meth:`member_configs`)."""
        model = ModelConfig(name=self.size)  # the U-ViT's own sizes, not the default residual MLP's
        cfg = apply_overrides(ExperimentConfig(name="diffusion", model=model, train=TrainConfig(task="diffusion")),
                              {**FIXED, **config_overrides(self, KNOBS)})
        per_epoch = max(1, len(raw_images(cfg).x_train) // self.batch_size)  # evaluations fall on epoch ends
        return apply_overrides(cfg, {"train.eval_every": self.every_epochs * per_epoch,
                                     "train.checkpoint_every": self.every_epochs})

    def alpha_min_values(self) -> list[float]:
        return parse_alpha_mins(self.alpha_mins, MAX_MEMBERS)

    def member_configs(self) -> list[ExperimentConfig]:
        """One experiment per α_min, named after it."""
        cfg = self.config()
        return [apply_overrides(cfg, {"name": f"diffusion-alpha_min-{a:g}", "model.alpha_min": a})
                for a in self.alpha_min_values()]

    @property
    def followers(self) -> tuple[JobFollower, ...]:
        return tuple(self.members)

    def _rebuild(self) -> None:
        """Every member's α schedule, before any training (after a Reset, the sidebar keeps one status line)."""
        if not any(f.running for f in self.members):
            self.members = [self.follower]
            self._statuses[:] = self.members
        self.notice.visible = False
        try:
            cfgs = self.member_configs()
        except (ConfigError, ValueError) as err:
            self.follower.status.error(f"Invalid settings: {err}")
            return
        self.follower.status.clear()
        self.diffusion.set_members([c.model.alpha_min for c in cfgs], [self._alphas(c) for c in cfgs])

    @staticmethod
    def _alphas(cfg: ExperimentConfig) -> list[float]:
        """α of every residual sub-layer (attention, MLP) of ``cfg``'s U-ViT, in forward order."""
        depth = cfg.model.get("depth")
        scales = sublayer_scales(cfg.model.shortcut, depth + 1, cfg.model.alpha_min)
        return [a for attn, mlp, _ in scales for a in (attn, mlp)]

    # -- actions ----------------------------------------------------------------------------------------------
    def _start(self, paused: bool) -> bool:
        for follower in self.members[1:]:  # an earlier run's members still training (its first one had ended)
            follower.forget()
        try:
            cfgs = self.member_configs()
        except (ConfigError, ValueError) as err:
            self.follower.status.error(f"Cannot start: {err}")
            return False
        jobs = self.follower.start_lockstep(cfgs, names=[c.name for c in cfgs], paused=paused, builders={},
                                            cadence={}, disk_every_s=0)
        if jobs is None:
            return False
        self.members = [self.follower]
        for k in range(1, len(jobs)):
            follower = JobFollower(self.follower.manager, views=[self._main])
            follower.on_metrics(lambda records, k=k: self._new_records(k, records))
            self.members.append(follower)
        self.diffusion.set_members([c.model.alpha_min for c in cfgs], [self._alphas(c) for c in cfgs])
        for follower, job in zip(self.members[1:], jobs[1:], strict=True):
            follower.follow(job)
        self._statuses[:] = self.members
        return True

    # -- live updates -----------------------------------------------------------------------------------------
    def _new_records(self, member: int, records: list[dict[str, Any]]) -> None:
        self.diffusion.extend(member, records)
        if any(r.get("kind") == "eval" for r in records):
            self._read_figures(member)

    def _read_figures(self, member: int) -> None:
        """Draw the member's newest samples and probe grid (written before the evaluation's record)."""
        job = self.members[member].job
        if job is None:
            return
        samples, probes = job.run.figures(layout.SAMPLES), job.run.figures(layout.PROBE_FIGURE, ".json")
        with contextlib.suppress(OSError, ValueError, KeyError):  # gone, or swapped for a link since listed
            if samples and samples[-1][0] > self.diffusion.samples_step[member]:
                self.diffusion.show_samples(member, samples[-1][0], read_picture(samples[-1][1]))
        with contextlib.suppress(OSError, ValueError, KeyError):
            if probes and probes[-1][0] > self.diffusion.probe_step[member]:
                grid = read_json(probes[-1][1], LIMITS["figure"])
                self.diffusion.show_probe(member, probes[-1][0], grid["accuracy"], grid["times"])

    # -- export -----------------------------------------------------------------------------------------------
    def config_yaml(self) -> io.BytesIO:
        """The shared experiment and the α_min values, as YAML (``python -m lab train`` once per α_min)."""
        text = yaml.safe_dump({"sweep": {"model.alpha_min": self.alpha_min_values()}, **to_dict(self.config())},
                              sort_keys=False)
        return io.BytesIO(text.encode())

    def evaluations_csv(self) -> io.BytesIO:
        """Every evaluation of every member: α_min, step and its numbers."""
        rows = [{"alpha_min": a, "step": int(s), **{k: rec[k][i] for k in rec if k != "step"}}
                for a, rec in zip(self.diffusion.alpha_mins, self.diffusion.records, strict=True)
                for i, s in enumerate(rec["step"])]
        return io.BytesIO(pd.DataFrame(rows).to_csv(index=False).encode())

    def exports(self) -> list[Export]:
        return [("Evaluations CSV", self.evaluations_csv, "diffusion.csv"), ("Config YAML", self.config_yaml,
                                                                              "diffusion.yaml")]

    # -- layout -----------------------------------------------------------------------------------------------
    def _messages(self) -> list[pn.viewable.Viewable]:
        return [self._statuses, self.notice]

    def views(self) -> pn.viewable.Viewable:
        """Curves over training, the α schedules, and per α_min its samples and probe grid."""
        return self._main
