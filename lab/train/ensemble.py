"""K residual MLPs of one architecture trained in lockstep as one batched computation.

*Residual Connections Harm Generative Representation Learning* argues from sweeps of one knob, ``model.alpha_min``;
training each point of a sweep alone repeats the same small matmuls K times over, and on a CPU the toy models'
steps are dominated by per-operation overhead, not arithmetic. Here member k's parameters are row k of stacked
tensors, every layer is one batched matmul over the members, and the optimiser updates all members with a
handful of whole-tensor operations.

Each member is the run it would have been alone (:class:`lab.train.tensor.Trainer` with its own config):

* initialisation: each member's ordinary model is built by :func:`lab.train.build.build_model` and its parameters
  stacked, so the initial values are bit-identical to a solo run's;
* batches: member k draws batch indices from its own ``train.seed`` exactly as ``Trainer.batch_indices`` does;
* droppath and ResidualDroppath: member k's masks come from its own generator, seeded with its ``train.seed``,
  drawn with the same calls, shapes and order as its DropPath modules would draw them;
* optimiser: the arithmetic of ``torch.optim.Adam``, ``AdamW`` and ``SGD`` (momentum, weight decay, bias
  correction, the learning rate of :func:`lab.train.schedule.learning_rate` at every step) with member k's own
  hyper-parameters, weight decay on the parameters :func:`lab.train.optim.make_optimizer` decays (the stacks of
  :func:`lab.train.optim.decayed`). Operations are ordered as torch.optim orders them, so members match solo
  runs up to float rounding (in float64, 30 steps of Adam, AdamW or SGD with momentum leave every parameter
  within 1e-15 of the solo run's, relative to the tensor's largest entry). In float32 the batched matmuls round
  differently from a solo run's ``addmm`` (gradients agree to about 3e-7 of their scale), and training amplifies
  any rounding: after 60 Adam steps of the spiral model a member can sit 40 % of a tensor's scale away from its
  solo run, exactly as far as the solo run moves when its initial parameters are changed by one ulp.

What may differ between members: :data:`MEMBER_KEYS`. Everything else (architecture, data, batch size, optimiser
type, epochs, evaluation cadence, device) is shared; :func:`ensemble_groups` splits a list of configs into
groups that can each be one ensemble.

Batched matmuls (``torch.baddbmm``) rather than ``torch.func.vmap`` over ``functional_call``: measured on one CPU
thread for the 32 × 32 MLP at batch 256 (forward and backward), baddbmm takes 7.6 / 31 / 98 ms per ensemble
step at K = 1 / 8 / 32 and vmap 22 / 35 / 97 ms. vmap's batching layer adds a fixed cost per operation that only
vanishes once the arithmetic dominates, and the per-member shortcut scales would have to enter it as batched
tensors anyway, so the explicit batched form is as fast or faster at every K.

Stacked layout: block parameters live in ``[L, K, ...]`` tensors whose block slices ``[K, ...]`` are contiguous
leaves of the autograd graph, with their gradients pre-assigned as slices of ``[L, K, ...]`` gradient tensors:
backward accumulates straight into the stacked gradient, and the optimiser runs over six tensors whatever K and L.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from lab.config import ExperimentConfig, TrainConfig, flatten, to_dict
from lab.data.toy2d import ToyData
from lab.nn.mlp import ResidualMLP, make_activation
from lab.nn.registry import model_parameters
from lab.seeds import epoch_seed
from lab.train.build import build_data, build_model, build_task, check_data
from lab.train.core import (
    Callback,
    Diverged,
    batch_schedule,
    check_finite,
    divergence_hint,
    droppath_mode,
    emit,
    evaluates_after,
    resolve_device,
    use_cpu_threads,
)
from lab.train.optim import decayed, make_optimizer
from lab.train.schedule import learning_rate
from lab.train.stacked import StackedParameters
from lab.train.tasks import pixel_task_metrics

MEMBER_KEYS = (
    "name", "model.shortcut", "model.alpha_min", "model.zero_init", "model.seed",
    "train.lr", "train.betas", "train.weight_decay", "train.momentum", "train.lr_schedule", "train.warmup_steps",
    "train.warmup_epochs", "train.lr_scaling",
    "train.min_lr", "train.seed", "train.droppath", "train.drop_path_rate", "train.log_every",
)
"""Config keys that may differ between the members of one ensemble."""

MODEL = "residual_mlp"
_BLOCK = "blocks."


def shared_settings(cfg: ExperimentConfig) -> dict[str, Any]:
    """The settings every member of one ensemble must share: the config's dotted keys minus :data:`MEMBER_KEYS`,
    model keys as the builder sees them (an unset key reads as the builder's default)."""
    flat = flatten(to_dict(cfg))
    params, _ = model_parameters(cfg.model.name)
    flat.update({f"model.{k}": cfg.model.get(k) for k in params if k != "drop_path_rate"})
    return {k: v for k, v in flat.items() if k not in MEMBER_KEYS}


def ensemble_groups(cfgs: Sequence[ExperimentConfig]) -> list[list[int]]:
    """Split configs into groups that can each train as one ensemble, in order of first appearance.

    Members of a group share :func:`shared_settings` and the batch schedule (ResidualDroppath members run apart
    from the others when the training set does not divide into whole batches). Builds each distinct data set
    once to count its training points, and checks it (:func:`~lab.train.build.check_data`).

    Raises:
        ValueError: a data set that cannot train (no test samples, one class).

    Returns:
        Lists of indices into ``cfgs``.
    """
    n_train: dict[str, int] = {}
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        data_key = repr(to_dict(cfg.data))
        if data_key not in n_train:
            data = build_data(cfg)
            check_data(cfg, data)  # a split without test samples is refused before any sweep folder exists
            n_train[data_key] = len(data.x_train)
        key = repr((shared_settings(cfg), batch_schedule(cfg.train, n_train[data_key])))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


class _MemberOptimizer:
    """What readers of ``trainer.optimizer`` see of one member: ``param_groups`` (its current learning rate) and
    ``state_dict()`` in the format of its own torch.optim optimizer, so a solo Trainer can resume from it."""

    def __init__(self, ensemble: EnsembleTrainer, index: int, template: torch.optim.Optimizer) -> None:
        self._ensemble, self._index, self._template = ensemble, index, template

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._template.param_groups

    def state_dict(self) -> dict[str, Any]:
        return self._ensemble.member_state_dict(self._index)["optimizer"]


class EnsembleMember:
    """Member k presented as a trainer (a :class:`lab.train.core.TrainerView`), for
    :class:`lab.train.core.Callback` subscribers (run recorders):
    ``cfg``, ``step``, ``epoch``, ``total_steps``, ``last_eval``, ``optimizer.param_groups[0]["lr"]``, ``model``,
    ``state_dict()`` and ``should_stop`` mean what they mean on a :class:`~lab.train.Trainer`.

    After the member ends, ``step`` stays at its last step and ``diverged`` holds the divergence, if that ended it.
    """

    def __init__(self, ensemble: EnsembleTrainer, index: int, config: ExperimentConfig,
                 callbacks: Iterable[Callback], optimizer: torch.optim.Optimizer) -> None:
        self.ensemble, self.index, self.config = ensemble, index, config
        self.cfg: TrainConfig = config.train
        self.alpha_min = config.model.alpha_min
        self.callbacks = list(callbacks)
        self.optimizer = _MemberOptimizer(ensemble, index, optimizer)
        self.should_stop = False
        self.last_eval: dict[str, float] = {}
        self.last_eval_step = -1
        self.ended = False
        self.diverged: Diverged | None = None
        self.end_step = 0

    @property
    def step(self) -> int:
        return self.end_step if self.ended else self.ensemble.step

    @property
    def epoch(self) -> int:
        return self.step // self.ensemble.steps_per_epoch

    @property
    def total_steps(self) -> int:
        return self.ensemble.total_steps

    @property
    def steps_per_epoch(self) -> int:
        return self.ensemble.steps_per_epoch

    @property
    def model(self) -> ResidualMLP:
        """A fresh :class:`ResidualMLP` holding this member's current parameters."""
        return self.ensemble.member_model(self.index)

    def state_dict(self) -> dict[str, Any]:
        """A checkpoint in :meth:`~lab.train.Trainer.state_dict`'s format."""
        return self.ensemble.member_state_dict(self.index)

    def emit(self, event: str, *args: Any) -> None:
        emit(self.callbacks, self, event, *args)


@dataclass
class _Masks:
    """One step's branch masks: ``keep [L, K, B, 1]`` multiplies F(h); ``detached [L, K, B, 1]`` (ResidualDroppath's
    training iteration) adds ``F(h).detach() · detached``; ``scale [K, 1, 1]`` divides (droppath's 1 − p)."""

    keep: torch.Tensor
    detached: torch.Tensor | None
    scale: torch.Tensor | None

    def apply(self, block: int, f: torch.Tensor) -> torch.Tensor:
        out = f * self.keep[block]
        if self.detached is not None:
            out = out + f.detach() * self.detached[block]
        return out if self.scale is None else out / self.scale

    @classmethod
    def draw(cls, members: Sequence[tuple[int, TrainConfig, torch.Generator]], rdp: dict[int, torch.Tensor],
             step: int, batch: int, depth: int, dtype: torch.dtype, device: torch.device) -> _Masks | None:
        """The masks of ``members`` (``(index, train config, generator)`` per slot) at ``step``, drawn per member from
        its own generator in block order with the shapes its DropPath modules use, so each member sees a solo run's
        masks; a ResidualDroppath drop iteration's masks go into ``rdp`` (by member index) for the next iteration.
        None when no member drops anything this step."""
        ones = torch.ones(depth, batch, 1, dtype=dtype, device=device)
        keep, detached, scale = [ones] * len(members), [None] * len(members), [1.0] * len(members)
        for slot, (k, cfg, generator) in enumerate(members):
            mode, rate = droppath_mode(cfg, step), cfg.drop_path_rate
            if (mode == "droppath" and rate > 0.0) or mode == "rdp_drop":
                p = torch.full((batch, 1), 1.0 - rate, dtype=dtype, device=device)
                keep[slot] = torch.stack([torch.bernoulli(p, generator=generator) for _ in range(depth)])
                if mode == "droppath":
                    scale[slot] = 1.0 - rate
                else:
                    rdp[k] = keep[slot]
            elif mode == "rdp_train":  # odd iteration: train the branches the previous one dropped
                keep[slot], detached[slot] = 1.0 - rdp[k], rdp[k]
        if all(t is ones for t in keep):
            return None
        if any(t is not None for t in detached):
            zeros = torch.zeros_like(ones)
            detached_t = torch.stack([zeros if t is None else t for t in detached], 1)
        else:
            detached_t = None
        scale_t = (torch.tensor(scale, dtype=dtype, device=device)[:, None, None]
                   if any(v != 1.0 for v in scale) else None)
        return cls(torch.stack(keep, 1), detached_t, scale_t)


class EnsembleTrainer:
    """Train K residual MLPs (:data:`MODEL`) that differ only in :data:`MEMBER_KEYS` as one batched computation.

    Shapes: K members still training, L blocks, width H, batch B, C classes; member inputs ``x [K, B, in]``,
    residual stream ``h [K, B, H]``, logits ``[K, B, C]``.

    A member whose training loss turns non-finite ends as diverged (``member.diverged`` says at which step and
    why, worded as a solo run's :class:`Diverged`); its parameters stay those of its last finite step and the
    others go on without it. A member whose callback sets ``should_stop`` ends after its final evaluation.

    Args:
        cfgs: one config per member; shared settings must agree (:func:`ensemble_groups` groups configs that do).
        callbacks: per member, subscribers to that member's events (as if it trained alone).
        group_callbacks: subscribers to the ensemble's events.
        data: the data set (default: built from the first config); its inputs must be flat, ``[n, in]``.

    Raises:
        ValueError: a model other than :data:`MODEL`, members that disagree on a shared setting, or image inputs.
    """

    def __init__(self, cfgs: Sequence[ExperimentConfig], callbacks: Sequence[Iterable[Callback]] | None = None,
                 group_callbacks: Iterable[Callback] = (), data: ToyData | None = None) -> None:
        cfgs = list(cfgs)
        if not cfgs:
            raise ValueError("an ensemble needs at least one member")
        for cfg in cfgs:
            if cfg.model.name != MODEL:
                raise ValueError(f"the ensemble trains {MODEL} models only; got model.name={cfg.model.name}")
        self._check_shared(cfgs)
        self.cfgs = cfgs
        train = cfgs[0].train
        self.device = resolve_device(train.device)
        use_cpu_threads(self.device, train.threads)
        data = data if data is not None else build_data(cfgs[0])
        self.task = build_task(cfgs[0], data)
        if data.x_train.ndim != 2 and self.task is None:  # a classifier of images reads their pixels as one vector
            data = ToyData(data.x_train.flatten(1), data.y_train, data.x_test.flatten(1), data.y_test, data.name)
        self.data = data.to(self.device)
        plans = {batch_schedule(cfg.train, len(data.x_train)) for cfg in cfgs}
        if len(plans) > 1:
            raise ValueError("members differ in batches per epoch (residual_droppath drops the last partial "
                             "batch); train them in separate ensembles (ensemble_groups)")
        self.batch_size, self.steps_per_epoch, self.total_steps = plans.pop()
        self.group_callbacks = list(group_callbacks)
        self.step = 0
        self.should_stop = False

        models = [build_model(cfg, data).to(self.device) for cfg in cfgs]
        self._templates = models
        self._params = StackedParameters(models, _BLOCK)
        self._stacks = self._params.stacks
        self.depth = models[0].depth
        self._skips, self.representation = models[0].skips, models[0].representation  # U-Net skips, probe state
        self._act = make_activation(models[0].blocks[0].branch.activation).forward
        # [L, K] in float64, so each scale rounds to the parameters' dtype exactly as a solo block's Python float
        self._alpha = torch.tensor([[b.alpha for b in m.blocks] for m in models], dtype=torch.float64).T
        self._beta = torch.tensor([[b.beta for b in m.blocks] for m in models], dtype=torch.float64).T
        self._scales()
        optimizers = [make_optimizer(m, cfg.train) for m, cfg in zip(models, cfgs, strict=True)]
        self._hyper = [{**opt.param_groups[0], "weight_decay": cfg.train.weight_decay}
                       for opt, cfg in zip(optimizers, cfgs, strict=True)]
        self._params.mark_decay(decayed(models[0], train.weight_decay_on))
        # per member, the index of each parameter in its torch.optim optimiser's state (group order, then position)
        self._state_index = [self._optimizer_index(m, opt) for m, opt in zip(models, optimizers, strict=True)]
        self._kind = train.optimizer
        self._params.zero_state(("exp_avg", "exp_avg_sq") if self._kind in ("adam", "adamw") else ("momentum_buffer",))
        per_member = callbacks if callbacks is not None else [()] * len(cfgs)
        if len(per_member) != len(cfgs):
            raise ValueError(f"{len(cfgs)} members but {len(per_member)} callback lists")
        self.members = [EnsembleMember(self, k, cfg, cbs, opt)
                        for k, (cfg, cbs, opt) in enumerate(zip(cfgs, per_member, optimizers, strict=True))]
        self._live = list(range(len(cfgs)))  # member index of each slot along the member axis
        self._droppath = any(cfg.train.droppath != "off" for cfg in cfgs)
        self._generators = [torch.Generator(device=self.device).manual_seed(cfg.train.seed) for cfg in cfgs]
        self._rdp_masks: dict[int, torch.Tensor] = {}  # member -> [L, B, 1] masks of its last drop iteration
        self._perm: tuple[int, torch.Tensor] | None = None  # (epoch, [K, n] permutations)
        self._final: dict[int, dict[str, Any]] = {}  # checkpoints of members that ended

    # -- construction -----------------------------------------------------------------------------------------
    @staticmethod
    def _check_shared(cfgs: list[ExperimentConfig]) -> None:
        first = shared_settings(cfgs[0])
        for cfg in cfgs[1:]:
            other = shared_settings(cfg)
            for key in sorted(first.keys() | other.keys()):
                if first.get(key) != other.get(key):
                    raise ValueError(f"members differ in {key} ({first.get(key)!r} vs {other.get(key)!r}), which one "
                                     f"ensemble cannot vary (it may vary {', '.join(MEMBER_KEYS)}); ensemble_groups "
                                     "splits such configs into ensembles")

    @staticmethod
    def _optimizer_index(model: ResidualMLP, optimizer: torch.optim.Optimizer) -> dict[str, int]:
        order = {id(p): i for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}
        return {name: order[id(p)] for name, p in model.named_parameters()}

    def _scales(self) -> None:
        """Shortcut and branch scales as ``[L, K, 1, 1]`` tensors, and per block whether every member's is 1 (then
        the block skips that multiply, as a solo block does)."""
        self._alpha_t = self._alpha.to(self.device, self._stacks["stem.weight"].data.dtype)[..., None, None]
        self._beta_t = self._beta.to(self.device, self._stacks["stem.weight"].data.dtype)[..., None, None]
        self._alpha_one = [bool((row == 1.0).all()) for row in self._alpha]
        self._beta_one = [bool((row == 1.0).all()) for row in self._beta]

    # -- members ----------------------------------------------------------------------------------------------
    @property
    def live(self) -> list[EnsembleMember]:
        """The members still training, in slot order."""
        return [self.members[k] for k in self._live]

    @property
    def epoch(self) -> int:
        """Completed epochs."""
        return self.step // self.steps_per_epoch

    def member_model(self, index: int) -> ResidualMLP:
        """An ordinary :class:`ResidualMLP` (on the ensemble's device, training mode) holding member ``index``'s
        current parameters (its last ones, once it ended)."""
        model = copy.deepcopy(self._templates[index])
        model.load_state_dict(self.member_state_dict(index)["model"])
        return model

    def member_state_dict(self, index: int) -> dict[str, Any]:
        """Member ``index``'s checkpoint in :meth:`~lab.train.Trainer.state_dict`'s format: ``model`` loads into
        :class:`ResidualMLP`, ``optimizer`` into the member's own torch.optim optimiser, and ``step``, the mask
        generator and the last ResidualDroppath masks let a solo :class:`~lab.train.Trainer` resume the member
        exactly."""
        if index in self._final:
            return self._final[index]
        slot = self._live.index(index)
        model = self._params.member_parameters(slot)
        state: dict[int, dict[str, torch.Tensor]] = {}
        if self.step > 0 and (self._kind != "sgd" or self._hyper[index]["momentum"] != 0):
            step_dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            for name, entry in self._params.member_state(slot).items():
                if self._kind != "sgd":
                    entry = {"step": torch.tensor(float(self.step), dtype=step_dtype), **entry}
                state[self._state_index[index][name]] = entry
        optimizer = self.members[index].optimizer._template.state_dict()
        optimizer["state"] = state
        rdp = self._rdp_masks.get(index)
        masks = [rdp[b].cpu() if rdp is not None else torch.empty(0) for b in range(self.depth)]
        return {"model": model, "optimizer": optimizer, "step": self.members[index].step,
                "mask_generator": self._generators[index].get_state(), "droppath_masks": masks}

    def _end(self, members: list[EnsembleMember]) -> None:
        """Take members out of the ensemble: keep their final checkpoints, tell their subscribers, drop their slots."""
        if not members:
            return
        for m in members:
            self._final[m.index] = self.member_state_dict(m.index)
            m.end_step, m.ended = self.step, True
            m.emit("on_train_end")
        gone = {m.index for m in members}
        keep = [slot for slot, k in enumerate(self._live) if k not in gone]
        slots = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._params.keep(slots)
        self._alpha, self._beta = self._alpha[:, keep], self._beta[:, keep]
        self._scales()
        self._live = [self._live[s] for s in keep]
        if self._perm is not None:
            self._perm = (self._perm[0], self._perm[1][slots])

    # -- one step ---------------------------------------------------------------------------------------------
    def batch_indices(self, step: int) -> torch.Tensor:
        """``[K, B]`` training indices of global ``step``, row k as member k's ``Trainer.batch_indices(step)``."""
        epoch, k = divmod(step, self.steps_per_epoch)
        if self._perm is None or self._perm[0] != epoch:
            n = len(self.data.x_train)
            rows = {}
            for seed in {self.members[i].cfg.seed for i in self._live}:
                g = torch.Generator().manual_seed(epoch_seed(seed, epoch))
                rows[seed] = torch.randperm(n, generator=g)
            perm = torch.stack([rows[self.members[i].cfg.seed] for i in self._live]).to(self.device)
            self._perm = (epoch, perm)
        return self._perm[1][:, k * self.batch_size:(k + 1) * self.batch_size]

    def _masks(self, step: int, batch: int) -> _Masks | None:
        """This step's droppath / ResidualDroppath masks (:meth:`_Masks.draw`), or None."""
        if not self._droppath:
            return None
        members = [(k, self.members[k].cfg, self._generators[k]) for k in self._live]
        return _Masks.draw(members, self._rdp_masks, step, batch, self.depth, self._stacks["stem.weight"].data.dtype,
                           self.device)

    def _logits(self, x: torch.Tensor, masks: _Masks | None = None, slots: torch.Tensor | None = None) -> torch.Tensor:
        """``x [K, B, in]`` (or ``[B, in]``, shared) → logits ``[K, B, C]``; ``slots`` restricts to those members."""
        s = self._stacks
        head_w, head_b = s["head.weight"].data, s["head.bias"].data
        if slots is not None:
            head_w, head_b = head_w[slots], head_b[slots]
        return torch.baddbmm(head_b.unsqueeze(1), self._features(x, masks, slots), head_w.transpose(1, 2))

    def _features(self, x: torch.Tensor, masks: _Masks | None = None, slots: torch.Tensor | None = None,
                  upto: int | None = None) -> torch.Tensor:
        """``x [K, B, in]`` (or ``[B, in]``, shared) → the last block's output h_L ``[K, B, H]`` (or h_upto: the
        state a probe reads is h_representation). A U-Net member adds its skips as
        :class:`~lab.nn.mlp.ResidualMLP` does."""
        s = self._stacks
        if slots is None:
            stem_w, stem_b = s["stem.weight"].data, s["stem.bias"].data
            block_w, block_b = s["blocks.branch.fc.weight"].leaves, s["blocks.branch.fc.bias"].leaves
            alpha, beta = self._alpha_t, self._beta_t
        else:
            stem_w, stem_b = s["stem.weight"].data[slots], s["stem.bias"].data[slots]
            block_w = s["blocks.branch.fc.weight"].data[:, slots]
            block_b = s["blocks.branch.fc.bias"].data[:, slots]
            alpha, beta = self._alpha_t[:, slots], self._beta_t[:, slots]
        if x.ndim == 2:
            x = x.expand(len(stem_w), *x.shape)
        h = torch.baddbmm(stem_b.unsqueeze(1), x, stem_w.transpose(1, 2))
        states = [h] if self._skips else None
        for b in range(self.depth if upto is None else upto):
            if b in self._skips:
                h = h + states[self._skips[b]]
            f = self._act(torch.baddbmm(block_b[b].unsqueeze(1), h, block_w[b].transpose(1, 2)))
            if masks is not None:
                f = masks.apply(b, f)
            if not self._beta_one[b]:
                f = f * beta[b]
            h = f + h if self._alpha_one[b] else torch.addcmul(f, h, alpha[b])
            if states is not None:
                states.append(h)
        return h

    @torch.no_grad()
    def features(self, x: torch.Tensor, upto: int | None = None) -> torch.Tensor:
        """The live members' states at depth ``upto`` (default the last, h_L) of inputs ``x [B, in]`` (on the
        ensemble's device), without droppath: ``[K, B, H]``, in slot order (:attr:`live`)."""
        return self._features(x, upto=upto)

    def train_step(self) -> dict[int, float]:
        """One optimisation step of every live member on its batch of step ``self.step``.

        Returns:
            The training loss per member index. Members whose loss is non-finite end as diverged (no update).
        """
        idx = self.batch_indices(self.step)  # [K, B]
        x, y = self.data.x_train[idx], self.data.y_train[idx]
        masks = self._masks(self.step, idx.shape[1])
        if self.task is None:
            logits = self._logits(x, masks)
            losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(idx.shape).mean(1)
        else:  # each member's corruption of its batch, drawn as its solo run draws it
            draws = [self.task.step_draw(x[slot], self.members[k].cfg.seed, self.step)
                     for slot, k in enumerate(self._live)]
            inputs, target, weight = (torch.stack(parts) for parts in zip(*draws, strict=True))
            losses = self.task.loss(self._logits(inputs, masks), target, weight)
        values = losses.tolist()
        out = {k: v for k, v in zip(self._live, values, strict=True)}
        finite = [slot for slot, v in enumerate(values) if math.isfinite(v)]
        self._params.zero_grad()
        if len(finite) == len(values):
            losses.sum().backward()
        elif finite:  # the diverged members' slices get no gradient from the loss
            losses[torch.tensor(finite, device=self.device)].sum().backward()
        diverged = []
        for slot, value in enumerate(values):
            if slot not in finite:
                m = self.members[self._live[slot]]
                m.diverged = Diverged(self.step, value, divergence_hint(m.cfg, m.alpha_min))
                diverged.append(m)
        self._end(diverged)
        if self._live:
            self._update()
        return out

    @torch.no_grad()
    def _update(self) -> None:
        """One torch.optim step per member on the stacked tensors (Adam / AdamW / SGD, as in ``_single_tensor_*``)."""
        t = self.step + 1
        hyper = [self._hyper[k] for k in self._live]
        lrs = [learning_rate(self.members[k].cfg, self.step, self.total_steps, steps_per_epoch=self.steps_per_epoch,
                             batch=self.batch_size) for k in self._live]
        for k, lr in zip(self._live, lrs, strict=True):
            if self.members[k].cfg.lr_schedule != "constant" or self.members[k].cfg.lr_scaling != "none":
                for group in self.members[k].optimizer.param_groups:
                    group["lr"] = lr
        self._params.update(self._kind, t, lrs, hyper)

    # -- evaluation and the loop ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, members: Sequence[int] | None = None, chunk: int = 8192,
                 rows: int = 8192) -> dict[int, dict[str, float]]:
        """Loss and accuracy on the train and test sets per member (no droppath), as ``Trainer.evaluate`` (for a
        generative task, :func:`~lab.train.tasks.pixel_task_metrics`).

        Args:
            members: member indices still training (default: all of them).
            chunk: inputs per loss sum, as ``Trainer.evaluate``'s chunk.
            rows: activation rows per forward pass, all members together: a chunk's forward runs in pieces of
                ``rows // K`` inputs, whose ``[K, rows // K, H]`` activations stay in the CPU's cache (a row's
                logits do not depend on the piece it is computed in, so the metrics are those of one pass).
        """
        members = list(self._live) if members is None else list(members)
        slots = None if members == self._live else torch.tensor([self._live.index(k) for k in members],
                                                                 dtype=torch.long, device=self.device)
        if self.task is not None:
            metrics = pixel_task_metrics(self.task, self.data, lambda x: self._logits(x, slots=slots),
                                         lambda x: self._features(x, slots=slots, upto=self.representation))
            out = dict(zip(members, metrics, strict=True))
            for k in members:
                self.members[k].last_eval, self.members[k].last_eval_step = out[k], self.step
            return out
        piece = max(1, rows // max(1, len(members)))
        out: dict[int, dict[str, float]] = {k: {} for k in members}
        for split, (x, y) in {"train": (self.data.x_train, self.data.y_train),
                              "test": (self.data.x_test, self.data.y_test)}.items():
            if len(x) == 0:
                continue
            loss_sum, correct = [0.0] * len(members), [0] * len(members)
            for i in range(0, len(x), chunk):
                inputs = x[i:i + chunk]
                logits = torch.cat([self._logits(inputs[j:j + piece], slots=slots)
                                    for j in range(0, len(inputs), piece)], 1)  # [K, chunk, C]
                target = y[i:i + chunk]
                losses = F.cross_entropy(logits.transpose(1, 2), target.expand(len(members), -1), reduction="none")
                loss_sum = [a + b for a, b in zip(loss_sum, losses.sum(1).tolist(), strict=True)]
                hits = (logits.argmax(2) == target).sum(1).tolist()
                correct = [a + b for a, b in zip(correct, hits, strict=True)]
            for k, total, right in zip(members, loss_sum, correct, strict=True):
                out[k][f"{split}_loss"] = total / len(x)
                out[k][f"{split}_acc"] = right / len(x)
        for k in members:
            self.members[k].last_eval, self.members[k].last_eval_step = out[k], self.step
        return out

    def _eval_and_emit(self, members: list[EnsembleMember] | None = None) -> None:
        """Evaluate, tell each member's subscribers; a member with non-finite metrics ends as diverged."""
        metrics = self.evaluate(None if members is None else [m.index for m in members])
        finite, diverged = {}, []
        for k, values in metrics.items():
            m = self.members[k]
            try:
                check_finite(values, self.step, "train_loss", m.cfg, m.alpha_min)
            except Diverged as err:
                m.diverged = err
                diverged.append(m)
            else:
                finite[k] = values
                m.emit("on_eval_end", values)
        self._end(diverged)
        self._emit("on_eval_end", finite)

    def _emit(self, event: str, *args: Any) -> None:
        emit(self.group_callbacks, self, event, *args)

    def _stop_requested(self) -> None:
        """Members whose subscribers set ``should_stop`` end after a final evaluation, as a solo run would."""
        stopping = [m for m in self.live if m.should_stop]
        if not stopping:
            return
        unevaluated = [m for m in stopping if m.last_eval_step != self.step]
        if unevaluated:
            self._eval_and_emit(unevaluated)
        self._end([m for m in stopping if not m.ended])

    def fit(self, steps: int | None = None) -> dict[int, dict[str, float]]:
        """Train until ``total_steps`` (or ``steps`` more), ``should_stop``, or until no member is left.

        Returns:
            The last evaluation's metrics per member index (ended members included).
        """
        end = self.total_steps if steps is None else min(self.total_steps, self.step + steps)
        self.should_stop = False
        for m in self.live:
            m.should_stop = False
            m.emit("on_train_start")
        self._emit("on_train_start")
        try:
            while self.step < end and not self.should_stop and self._live:
                losses = self.train_step()
                self.step += 1
                for m in self.live:
                    m.emit("on_step_end", losses[m.index])
                self._emit("on_step_end", losses)
                if evaluates_after(self.cfgs[0].train, self.step, self.steps_per_epoch):
                    self._eval_and_emit()
                if self.step % self.steps_per_epoch == 0:
                    for m in self.live:
                        m.emit("on_epoch_end")
                self._stop_requested()
            if self._live and any(m.last_eval_step != self.step for m in self.live):
                self._eval_and_emit()
        finally:  # also after an error: subscribers close what they opened
            for m in self.live:
                m.emit("on_train_end")
            self._emit("on_train_end")
        return {m.index: m.last_eval for m in self.members}

