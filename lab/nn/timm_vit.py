"""timm Vision Transformers behind the lab's model surface: each block as its two residual steps.

A timm ViT block computes ``x = x + drop_path1(ls1(attn(norm1(x))))`` then ``x = x + drop_path2(ls2(mlp(norm2(x))))``:
two residual steps on the token stream, each with an identity shortcut (α = β = 1) and a pre-norm branch. The
analyses of the three papers (Residual Alignment's Jacobians, rank and probes per layer) take them as the residual
blocks they are: :class:`TimmViT` names them ``blocks.{2i}`` (block i's attention) and ``blocks.{2i+1}`` (its
MLP), as every lab model names its blocks, and its ``forward_intermediates`` returns the stream ``[B, tokens, D]``
after the embedding (h_0) and after every step.
``self.model`` owns every parameter under timm's keys; weights are never downloaded. An imported ViT's
``input_stage`` (:class:`~lab.nn.input_stage.InputStage`) makes the lab's tensors into its inputs first.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lab.nn.input_stage import InputStage, input_stage
from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.registry import register_model
from lab.nn.residual_steps import ResidualSteps

__all__ = ["TimmViT", "ViTStep", "timm_vit"]


class ViTStep(nn.Module):
    """One residual step of a timm ViT block: ``x + drop_path(F(x))`` with ``F = ls ∘ fn ∘ norm`` (pre-norm, so no
    post-activation). Shares the block's modules."""

    alpha = 1.0
    beta = 1.0
    post_act = None

    def __init__(self, norm: nn.Module, fn: nn.Module, scale: nn.Module, drop_path: nn.Module) -> None:
        super().__init__()
        self.branch = nn.Sequential(norm, fn, scale)
        self.drop_path = drop_path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path(self.branch(x))


class TimmViT(ResidualSteps):
    """A timm ``VisionTransformer`` with the lab's model surface: ``iter_blocks`` over its 2 × depth residual steps,
    per-step ``forward_intermediates``.

    Args:
        model: a ``timm.models.vision_transformer.VisionTransformer``.
        inputs: what makes the lab's tensors into the network's inputs (None: it takes them as they are).
    """

    def __init__(self, model: nn.Module, inputs: InputStage | None = None) -> None:
        super().__init__(model, [ViTStep(*parts) for b in model.blocks for parts in (
            (b.norm1, b.attn, b.ls1, b.drop_path1), (b.norm2, b.mlp, b.ls2, b.drop_path2))])  # even j: attention
        self.input_stage = inputs
        self.num_classes = model.num_classes

    def no_weight_decay(self) -> set[str]:
        """What timm's ``no_weight_decay()`` names (position embedding, class token), under ``model.``."""
        own = dict(self.named_parameters())
        return {f"model.{n}" for n in self.model.no_weight_decay()} & own.keys()

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W]`` → h_0 ``[B, tokens, D]``: patches, class token and positions, as timm's forward (after
        the input stage)."""
        m = self.model
        x = x if self.input_stage is None else self.input_stage(x)
        return m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(x))))

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NLC", intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """The token stream after the embedding and after every residual step (:mod:`lab.nn.intermediates`).

        Returns:
            ``(features [B, D], states)`` (the pooled, normed features timm's head reads) or only ``states``:
            h_0 and each step's output ``[B, tokens, D]``.
        """
        check_format(output_fmt, ("NLC",))
        states, last = collect(self._stream(x), len(self._steps) + 1, indices, stop_early and intermediates_only)
        return states if intermediates_only else (self.pool(last), states)

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """h_L → pre-logits ``[B, D]``: timm's final norm, pooling and fc-norm."""
        return self.model.forward_head(self.model.norm(h), pre_logits=True)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(last_state(self._stream(x)))

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.model.head(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


@register_model(family="timm_vit", example={"num_classes": 3, "img_size": 32}, input_shape=(3, 32, 32))
def timm_vit(arch: str = "vit_tiny_patch16_224", num_classes: int = 1000, in_chans: int = 3, img_size: int = 224,
             drop_path_rate: float = 0.0, patch_size: int = 0, inputs: dict | None = None) -> TimmViT:
    """A timm Vision Transformer by name (``vit_tiny_patch16_224``, ``vit_base_patch16_224``, …) at ``img_size``,
    never pretrained.

    Args:
        arch: a timm ViT architecture name.
        num_classes: classifier outputs.
        in_chans: input channels.
        img_size: image side (a multiple of the patch size).
        drop_path_rate: stochastic depth (timm's ``drop_path_rate``).
        patch_size: patch side (0: the architecture's own, 16 for ``vit_*_patch16_*``).
        inputs: the settings of an input stage (:class:`~lab.nn.input_stage.InputStage`) that makes the lab's
            tensors into this network's inputs; an imported network's (None: it takes them as they are).

    Raises:
        ValueError: ``arch`` is not one of timm's ViTs, or ``patch_size`` is negative.
    """
    import timm

    if arch not in timm.list_models(module="vision_transformer"):
        raise ValueError(f"timm's {arch!r} is no Vision Transformer")
    if patch_size < 0:
        raise ValueError(f"model.patch_size must be 0 (the architecture's own) or a side in pixels; got {patch_size}")
    stage = input_stage(inputs)
    own = {"patch_size": patch_size} if patch_size else {}
    return TimmViT(timm.create_model(arch, pretrained=False, num_classes=num_classes, in_chans=in_chans,
                                     img_size=img_size, drop_path_rate=drop_path_rate, **own), stage)
