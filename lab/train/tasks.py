"""What a residual MLP learns from a batch of images: the generative tasks of the Rank page and ``lab sweep``.

*Residual Connections Harm Generative Representation Learning* finds that decaying the identity shortcuts helps
**generative** representation learning (MAE, diffusion), where a classifier's final-layer probe is saturated and
cannot show it. Besides ``classify`` (cross-entropy on labels, :mod:`lab.train.tensor`'s default), a residual MLP
on flattened images (D pixels, standardised) learns one of two self-supervised analogues here:

* ``masked``: masked-pixel reconstruction, the MAE analogue. Per image, ``round(train.mask_ratio · D)`` pixels
  chosen at random are hidden (set to 0); the input is the visible pixels and the mask, ``[x ⊙ (1 − m), m]``
  (2D features), the output the D pixels, and the loss the mean squared error on the hidden pixels only, as
  MAE's loss is on the masked patches.
* ``denoise``: ε-prediction diffusion, the diffusion analogue. Per image, t ~ U(t₀, 1) and ε ~ N(0, I); the input
  is ``[x_t, emb(t)]`` with x_t = √ᾱ(t) x + √(1 − ᾱ(t)) ε on the continuous VP-SDE the U-ViT's pixel runs use
  (:class:`lab.nn.vpsde.VPSDE`) and emb the U-ViT's sinusoidal embedding of 999 t (:data:`TIME_DIM` features);
  the output is ε̂ and the loss the mean squared error on all pixels.

A model's representation is its residual stream at :attr:`~lab.nn.mlp.ResidualMLP.representation` (the last block,
or the encoder's output of the toy MAE with a decoder and U-Net skips) read on the probe's inputs
(:meth:`PixelTask.probe_inputs`: nothing hidden; for ``denoise``, images noised to t = :data:`PROBE_T`, inside the
training range, with one fixed draw of noise), which the rank and the linear probes against the digit labels
measure: the full ridge probe (``probe_acc``) and, the lab's addition, one fitted on five digits of each class
(``probe_few``: on 8 × 8 digits the full probe sits near its ceiling for any reasonable features).

Every draw (masks, t, ε) of a training step is a function of (``train.seed``, step) alone, so a resumed run, and
the same member trained in an ensemble, see the very same draws; evaluations draw from one fixed seed, so every
member and every evaluation is scored on the same corrupted inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lab.analysis.rank_sweep import few_label_probe_accuracy, ridge_probe_accuracy
from lab.config import PIXEL_TASKS
from lab.data.toy2d import ToyData
from lab.nn.uvit import timestep_embedding
from lab.nn.vpsde import VPSDE
from lab.seeds import step_seed

TIME_DIM = 16
"""Features of the noise level's embedding (denoise)."""
T_MIN = 1e-3
"""The smallest noise level drawn (t₀), as the reference's VP-SDE training."""
EVAL_SEED = 2**31 - 1
"""The seed of every evaluation's draws."""
PROBE_T = 0.1
"""The noise level of the ``denoise`` probe's inputs (training draws t from [t₀, 1])."""


class PixelTask:
    """One of :data:`PIXEL_TASKS` on images of ``dim`` pixels.

    Args:
        name: ``masked`` or ``denoise``.
        dim: pixels per image, D.
        mask_ratio: the share of pixels hidden per image (``masked``).
    """

    def __init__(self, name: str, dim: int, mask_ratio: float = 0.5) -> None:
        if name not in PIXEL_TASKS:
            raise ValueError(f"unknown pixel task {name!r}; valid: {', '.join(PIXEL_TASKS)}")
        self.name, self.dim = name, dim
        self.hidden = round(mask_ratio * dim)
        if name == "masked" and not 0 < self.hidden < dim:
            raise ValueError(f"train.mask_ratio={mask_ratio:g} hides {self.hidden} of {dim} pixels; it must hide "
                             "at least one and leave at least one")
        self.sde = VPSDE()

    @property
    def in_dim(self) -> int:
        """The model's input features: pixels and mask (masked), pixels and time embedding (denoise)."""
        return 2 * self.dim if self.name == "masked" else self.dim + TIME_DIM

    @property
    def out_dim(self) -> int:
        """The model's outputs: the D pixels (masked) or the D noise values (denoise)."""
        return self.dim

    def draw(self, x: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """One corruption of ``x [B, ...]`` (flattened to ``[B, D]``) from ``generator`` (on ``x``'s device).

        Returns:
            ``(inputs [B, in_dim], target [B, D], weight [B, D])``: the loss is the weighted mean squared error
            (:meth:`loss`); the weight is the mask (masked) or ones (denoise).
        """
        x = x.flatten(1)
        B, D = x.shape
        if self.name == "masked":
            order = torch.rand(B, D, generator=generator, device=x.device, dtype=x.dtype).argsort(1)
            mask = torch.zeros_like(x).scatter_(1, order[:, :self.hidden], 1.0)
            return torch.cat([x * (1 - mask), mask], 1), x, mask
        t = T_MIN + (1 - T_MIN) * torch.rand(B, generator=generator, device=x.device, dtype=x.dtype)
        noise = torch.randn(B, D, generator=generator, device=x.device, dtype=x.dtype)
        return torch.cat([self.sde.perturb(x, t, noise), self._time(t)], 1), noise, torch.ones_like(x)

    def _time(self, t: Tensor) -> Tensor:
        return timestep_embedding(self.sde.net_time(t), TIME_DIM).to(t.dtype)

    def step_draw(self, x: Tensor, seed: int, step: int) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`draw` for training step ``step`` of a run with ``train.seed`` = ``seed``."""
        return self.draw(x, torch.Generator(device=x.device).manual_seed(step_seed(seed, step)))

    def eval_draw(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`draw` from :data:`EVAL_SEED`: the same corruption of the same inputs at every evaluation."""
        return self.draw(x, torch.Generator(device=x.device).manual_seed(EVAL_SEED))

    @staticmethod
    def loss(output: Tensor, target: Tensor, weight: Tensor) -> Tensor:
        """Weighted mean squared error over the last two axes: ``[..., B, D] -> [...]`` (a scalar for one run,
        ``[K]`` for an ensemble's members)."""
        return ((output - target) ** 2 * weight).sum((-2, -1)) / weight.sum((-2, -1))

    def probe_inputs(self, x: Tensor) -> Tensor:
        """``x [B, ...]`` as the probe reads it, the model's input ``[B, in_dim]``: nothing hidden (masked); noised to
        t = :data:`PROBE_T` with the evaluations' fixed noise (denoise: a level the model was trained on)."""
        x = x.flatten(1)
        if self.name == "masked":
            return torch.cat([x, torch.zeros_like(x)], 1)
        t = torch.full((len(x),), PROBE_T, device=x.device, dtype=x.dtype)
        generator = torch.Generator(device=x.device).manual_seed(EVAL_SEED)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        return torch.cat([self.sde.perturb(x, t, noise), self._time(t)], 1)


def pixel_task_metrics(task: PixelTask, data: ToyData, outputs: Callable[[Tensor], Tensor],
                       features: Callable[[Tensor], Tensor], ridge: float = 1e-3) -> list[dict[str, float]]:
    """What an evaluation of K models learning ``task`` on ``data`` records, per model.

    Args:
        task: the task.
        data: the split (images and digit labels).
        outputs: model inputs ``[n, in_dim]`` → outputs ``[K, n, D]`` (in eval mode).
        features: model inputs ``[n, in_dim]`` → the representation ``[K, n, H]``.
        ridge: the probe's relative ridge penalty.

    Returns:
        Per model: ``train_loss`` and ``test_loss`` (the task's loss on the fixed evaluation draws of each set),
        ``probe_acc``, the held-out accuracy of a linear (ridge) read-out of the digit labels from ``features`` (the
        representation) of the probe's inputs, fitted on the training set
        (:func:`~lab.analysis.rank_sweep.ridge_probe_accuracy`), and ``probe_few``, the same fitted on five digits
        of each class (:func:`~lab.analysis.rank_sweep.few_label_probe_accuracy`).
    """
    out: dict[str, Tensor] = {}
    for split, x in (("train", data.x_train), ("test", data.x_test)):
        inputs, target, weight = task.eval_draw(x)
        out[f"{split}_loss"] = task.loss(outputs(inputs), target, weight)
    train, test = features(task.probe_inputs(data.x_train)), features(task.probe_inputs(data.x_test))
    probe = ridge_probe_accuracy(train, data.y_train, test, data.y_test, ridge=ridge, num_classes=data.num_classes)
    few = few_label_probe_accuracy(train, data.y_train, test, data.y_test, num_classes=data.num_classes)
    losses = {k: v.tolist() for k, v in out.items()}
    return [{"train_loss": losses["train_loss"][k], "test_loss": losses["test_loss"][k], "probe_acc": float(p),
             "probe_few": float(f)} for k, (p, f) in enumerate(zip(probe.tolist(), few.tolist(), strict=True))]
