"""The lab's MAE encoder seen as its residual steps: each block's attention and MLP sub-layer as one step each.

A :class:`~lab.nn.vit_block.DecayedBlock` computes ``h₁ = α_attn·h + β·attn(norm1(h))`` then
``h₂ = α_mlp·h₁ + β·mlp(norm2(h₁))``: two residual steps, each with its own decayed shortcut. The models analyse it
as one block (``α = α_attn·α_mlp``, its branch expanded by :class:`~lab.nn.vit_block.DecayedBranch`), as the
training code and the rank measures of *Residual Connections Harm Generative Representation Learning* read it per
block. :class:`SublayerSteps` gives the finer view the Residual Alignment and re-transformation analyses take on
any ViT (timm's are seen that way by :class:`~lab.nn.timm_vit.TimmViT`): ``blocks.{2i}`` is block i's attention,
``blocks.{2i+1}`` its MLP, and the stream holds h₀, then the state after every step. It computes exactly what the
encoder computes (the same modules, no copies).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lab.nn.intermediates import check_format, collect
from lab.nn.residual_steps import ResidualSteps
from lab.nn.vit_block import DecayedBlock

__all__ = ["SublayerStep", "SublayerSteps"]


class SublayerStep(nn.Module):
    """One residual sub-layer ``α·h + β·F(h)`` with ``F = fn ∘ norm`` (pre-norm: no post-activation)."""

    post_act = None

    def __init__(self, alpha: float, beta: float, norm: nn.Module, fn: nn.Module) -> None:
        super().__init__()
        self.alpha, self.beta = float(alpha), float(beta)
        self.branch = nn.Sequential(norm, fn)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.alpha * h + self.beta * self.branch(h)


class SublayerSteps(ResidualSteps):
    """A lab MAE (``MaskedAutoencoderViT``) with its 2 × depth encoder sub-layers as the residual blocks.

    Args:
        model: the MAE; its encoder stream is sequential (h_{i+1} = block_i(h_i)), which the split relies on.
    """

    def __init__(self, model: nn.Module) -> None:
        blocks = [b for _, b in model.iter_blocks()]
        if not blocks or not all(isinstance(b, DecayedBlock) for b in blocks):
            raise TypeError(f"{type(model).__name__}'s blocks are not all DecayedBlocks")
        super().__init__(model, [SublayerStep(a, b.beta, norm, fn) for b in blocks for a, norm, fn in (
            (b.alpha_attn, b.norm1, b.attn), (b.alpha_mlp, b.norm2, b.mlp))])  # even j: attention, odd j: MLP

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """h_0 ``[B, 1+N, D]``: the encoder's patch and position embeddings with the cls token, on every patch."""
        return self.model.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True)[0]

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NLC", intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """The encoder's token stream ``[B, 1+N, D]`` after the embedding and after every sub-layer, on every patch
        (:mod:`lab.nn.intermediates`); ``norm`` applies the encoder's final norm to each state."""
        check_format(output_fmt, ("NLC",))
        states, last = collect(self._stream(x), len(self._steps) + 1, indices, stop_early and intermediates_only)
        if norm:
            states = [self.model.norm(h) for h in states]
        return states if intermediates_only else (self.pool_features(last), states)

    def pool_features(self, h: torch.Tensor) -> torch.Tensor:
        """h_L → the encoder's features ``[B, D]`` (:meth:`~lab.nn.mae.MaskedAutoencoderViT.pool_features`)."""
        return self.model.pool_features(h)
