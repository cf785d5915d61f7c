"""A diffusion model: a noise-predicting network and the noise schedule it is trained on, as one module that the
loader engine trains like the MAE (``loss, … = model(x, y)``) and that samples images.

The registered U-ViTs of *Residual Connections Harm Generative Representation Learning* (§5, Table 4):

=================  =====================================================================================
``uvit_small``     the reference's U-ViT-S for 32 × 32 pixels (CIFAR): 512 wide, 13 blocks, 8 heads, patch 2
``uvit_mid``       U-ViT-M for 32 × 32 × 4 latents of 256 × 256 images: 768 wide, 17 blocks, 12 heads, patch 2,
                   on the discrete schedule (the others on the VP-SDE)
``uvit_tiny``      a laptop-sized U-ViT for 8 × 8 digits: 64 wide, 7 blocks, 4 heads, patch 2
=================  =====================================================================================

Class-conditional models (``num_classes`` > 0) train with label dropout: each label is replaced by the null class
with probability ``p_uncond`` (0.1, the reference's), so one network predicts both ε(x, y) and ε(x, ∅), and sampling
can use classifier-free guidance ε̃ = (1 + w) ε(x, y) − w ε(x, ∅) (the reference's form of the scale w).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from lab.nn.discrete_schedule import DiscreteSchedule
from lab.nn.registry import register_model, signature_of
from lab.nn.uvit import UViT
from lab.nn.vit_block import DecayedBlock
from lab.nn.vpsde import VPSDE

__all__ = ["SAMPLERS", "SCHEDULES", "SCHEDULE_SAMPLERS", "ScoreDiffusion"]

# the reference's schedules for pixels (CIFAR) and for latents (ImageNet), and their samplers
SCHEDULE_SAMPLERS = {"vpsde": VPSDE.samplers, "discrete": DiscreteSchedule.samplers}
SCHEDULES = tuple(SCHEDULE_SAMPLERS)
SAMPLERS = (*VPSDE.samplers, *DiscreteSchedule.samplers)  # every schedule's: ode, sde, dpm_solver


class ScoreDiffusion(nn.Module):
    """ε-prediction diffusion with a U-ViT, on the continuous VP-SDE (:mod:`lab.nn.vpsde`, the reference's for
    pixels) or on the discrete schedule (:mod:`lab.nn.discrete_schedule`, its for latents). Either way times are
    continuous, t ∈ [0, 1], and the schedule says what the network sees (999 t, or the step n = N t).

    Args:
        net: the noise predictor ``(x_t, time, y) -> ε̂``.
        schedule: ``vpsde`` or ``discrete``.
        beta_min: β₀ of the VP-SDE.
        beta_max: β₁ of the VP-SDE.
        p_uncond: probability of training a labelled sample as unlabelled (``net`` must have a null class).
    """

    def __init__(self, net: UViT, schedule: str = "vpsde", beta_min: float = 0.1, beta_max: float = 20.0,
                 p_uncond: float = 0.1) -> None:
        super().__init__()
        if not 0.0 <= p_uncond < 1.0:
            raise ValueError(f"p_uncond must be in [0, 1); got {p_uncond}")
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
        self.net = net
        self.process = VPSDE(beta_min, beta_max) if schedule == "vpsde" else DiscreteSchedule()
        self.p_uncond = p_uncond if net.null_class is not None else 0.0

    @property
    def samplers(self) -> tuple[str, ...]:
        """The samplers of this model's schedule: ``ode`` and ``sde`` (VP-SDE), ``dpm_solver`` (discrete)."""
        return self.process.samplers

    @property
    def conditional(self) -> bool:
        return self.net.num_classes > 0

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of the images the model generates."""
        (gh, gw), p = self.net.grid_size, self.net.patch_size
        return self.net.in_chans, gh * p, gw * p

    def _labels(self, y: Tensor | None) -> Tensor | None:
        return y if self.conditional else None

    def noise_pred(self, x: Tensor, t: Tensor, y: Tensor | None = None, guidance: float = 0.0) -> Tensor:
        """ε̂(x_t, t) ``[B, C, H, W]``, with classifier-free guidance of scale ``guidance`` (needs labels and a null
        class)."""
        y = self._labels(y)
        time = self.process.net_time(t)
        eps = self.net(x, time, y)
        if guidance == 0.0:
            return eps
        if y is None or self.net.null_class is None:
            raise ValueError("classifier-free guidance needs a class-conditional model trained with label dropout")
        null = torch.full_like(y, self.net.null_class)
        return (1.0 + guidance) * eps - guidance * self.net(x, time, null)

    def forward(self, x: Tensor, y: Tensor | None = None, *,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``x [B, C, H, W]`` (and labels ``y [B]`` when conditional) → ``(loss, per-sample loss [B])``.

        ``generator`` draws t, the noise and the label dropout (default: the global RNG), e.g. to score held-out
        images on the same draws at every evaluation.
        """
        y = self._labels(y)
        if y is not None and self.training and self.p_uncond > 0:
            drop = torch.rand(len(y), device=y.device, generator=generator) < self.p_uncond
            y = torch.where(drop, torch.full_like(y, self.net.null_class), y)
        per_sample = self.process.loss(lambda xt, t: self.net(xt, self.process.net_time(t), y), x, generator=generator)
        return per_sample.mean(), per_sample

    @torch.no_grad()
    def sample(self, n: int, *, steps: int = 50, sampler: str | None = None, y: Tensor | None = None,
               guidance: float = 0.0, generator: torch.Generator | None = None,
               device: torch.device | str | None = None) -> Tensor:
        """``n`` images ``[n, C, H, W]`` in the data's scale, from noise drawn with ``generator``.

        Args:
            n: how many.
            steps: network evaluations of the sampler.
            sampler: one of :attr:`samplers` (default: the first, ``ode`` or ``dpm_solver``); on the VP-SDE ``ode``
                is the reference's training grids' and ``sde`` its FID samples'.
            y: labels ``[n]`` of a conditional model (default: classes in turn, 0, 1, 2, …).
            guidance: classifier-free guidance scale w (0: none).
            generator: the initial noise and the SDE's noise.
            device: where to sample (default: the model's).
        """
        device = torch.device(device) if device is not None else next(self.parameters()).device
        if self.conditional and y is None:
            y = torch.arange(n, device=device) % self.net.num_classes
        x = torch.randn(n, *self.image_shape, device=device, generator=generator)
        return self.process.sample(lambda xt, t: self.noise_pred(xt, t, y, guidance), x, steps,
                                   sampler=sampler or self.samplers[0], generator=generator)

    # -- analysis surface: the network's ------------------------------------------------------------------------
    def iter_blocks(self) -> Iterator[tuple[str, DecayedBlock]]:
        """The U-ViT's blocks, ``("net.in_blocks.0", block)`` … in forward order."""
        for name, block in self.net.iter_blocks():
            yield f"net.{name}", block

    def forward_intermediates(self, x: Tensor, t: Tensor, y: Tensor | None = None,
                              indices: int | Sequence[int] | None = None, **kwargs) -> list[Tensor] | tuple:
        """The U-ViT's residual stream on ``x`` at continuous times ``t [B]`` (:meth:`UViT.forward_intermediates`)."""
        return self.net.forward_intermediates(x, self.process.net_time(t), self._labels(y), indices, **kwargs)

    def no_weight_decay(self) -> set[str]:
        return {f"net.{name}" for name in self.net.no_weight_decay()}


_SMALL = dict(img_size=32, patch_size=2, in_chans=3, embed_dim=512, depth=12, num_heads=8)
_MID = dict(img_size=32, patch_size=2, in_chans=4, embed_dim=768, depth=16, num_heads=12)
_TINY = dict(img_size=8, patch_size=2, in_chans=1, embed_dim=64, depth=6, num_heads=4)
_SDE_KEYS = ("schedule", "beta_min", "beta_max", "p_uncond")


def _build(sizes: dict, kwargs: dict) -> ScoreDiffusion:
    sde = {k: kwargs.pop(k) for k in _SDE_KEYS if k in kwargs}
    if kwargs.get("num_classes", 0) and sde.get("p_uncond", 0.1) > 0:
        kwargs.setdefault("label_dropout", True)
    return ScoreDiffusion(UViT(**{**sizes, **kwargs}), **sde)


def _signature(sizes: dict, **defaults):
    """The builder's keywords: U-ViT's (its sizes as defaults) and the diffusion's (``defaults`` replacing theirs)."""
    import inspect

    uvit = signature_of(UViT, drop=("label_dropout",), **sizes)(lambda: None).__signature__
    own = inspect.signature(ScoreDiffusion).parameters
    sde = [p.replace(default=defaults.get(n, p.default)) for n, p in own.items() if n in _SDE_KEYS]

    def decorate(fn):
        fn.__signature__ = inspect.Signature([*uvit.parameters.values(), *sde])
        return fn

    return decorate


def _schedule_extras(knobs: dict) -> tuple[str, ...]:
    """The extras a U-ViT's settings need: the discrete schedule takes diffusers' scheduler and DPM-Solver."""
    return ("diffusion",) if knobs["schedule"] == "discrete" else ()


_EXAMPLE = {"img_size": 8, "in_chans": 1, "embed_dim": 16, "depth": 2, "num_heads": 2}
_EXAMPLE_INPUT = (1, 8, 8)
"""A small instance for the tests that build every registered model (at uvit_tiny's 8 × 8 single-channel size)."""


@register_model(family="uvit", task="diffusion", example=_EXAMPLE, input_shape=_EXAMPLE_INPUT,
                requires=_schedule_extras)
@_signature(_SMALL)
def uvit_small(**kwargs) -> ScoreDiffusion:
    """U-ViT-S/2 for 32 × 32 images (the reference's CIFAR-10 model; Table 4 row 1 trains it on CIFAR-100)."""
    return _build(_SMALL, kwargs)


@register_model(family="uvit", task="diffusion", example=_EXAMPLE, input_shape=_EXAMPLE_INPUT,
                requires=_schedule_extras)
@_signature(_MID, schedule="discrete")
def uvit_mid(**kwargs) -> ScoreDiffusion:
    """U-ViT-M/2 on 32 × 32 × 4 latents (ImageNet at 256 × 256 through a VAE; Table 4 rows 2–3), on the discrete
    schedule as the reference's latent models."""
    return _build(_MID, {"schedule": "discrete", **kwargs})


@register_model(family="uvit", task="diffusion", example=_EXAMPLE, input_shape=_EXAMPLE_INPUT,
                requires=_schedule_extras)
@_signature(_TINY)
def uvit_tiny(**kwargs) -> ScoreDiffusion:
    """A U-ViT for 8 × 8 single-channel digits that trains in minutes on a CPU: 64 wide, 7 blocks, 4 heads."""
    return _build(_TINY, kwargs)
