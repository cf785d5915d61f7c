"""U-ViT with decayed identity shortcuts: the diffusion backbone of *Residual Connections Harm Generative
Representation Learning* (§5, Table 4).

U-ViT (Bao et al. 2023, *All are Worth Words: A ViT Backbone for Diffusion Models*) treats everything as tokens: the
noise level as one token, the class label (when conditional) as another, then the image's patches. A stack of
``depth // 2`` *in* blocks, one *mid* block and ``depth // 2`` *out* blocks runs over them; out block j first fuses
the output of in block ``depth // 2 − 1 − j`` (a long skip, U-Net style) by concatenation and a Linear, then runs as
a block. A LayerNorm, a Linear to patch pixels, and a 3 × 3 convolution on the image give the prediction (the
noise ε). Built as the reference code builds it (``libs/uvit.py`` of the authors' repository): pre-norm blocks on
timm's ``Attention`` and ``Mlp``, no qkv bias, LayerNorm ε 1e-5, sinusoidal noise-level embedding, learned
position embeddings, truncated-normal (0.02) initialisation of every Linear.

The paper's change: every residual sub-layer of the in, mid and out blocks scales its identity by α
(:class:`~lab.nn.vit_block.DecayedBlock`), "up to the end of the decoder": with the ``sublayer`` schedule α falls
linearly over all 2 · (depth + 1) sub-layers, from 1 at the first to ``alpha_min`` at the last. Every other
schedule of :mod:`lab.shortcuts` is available for ablations; ``alpha_min=1`` is the reference U-ViT exactly.

The analysis surface matches the lab's other models: :meth:`UViT.iter_blocks` names the depth + 1 blocks in
forward order, :meth:`UViT.forward_intermediates` gives the residual stream h_0 … h_{depth+1} (h_0 the tokens
entering the first block), all ``[B, extras + N, D]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.vit_block import DecayedBlock, sublayer_scales

__all__ = ["UViT", "timestep_embedding"]


def timestep_embedding(timesteps: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """The sinusoidal embedding of (possibly fractional) noise levels ``[B] -> [B, dim]`` float32, cosines first.

    The reference's formula: with ``half = dim // 2`` frequencies ``f_k = max_period^(−k / half)``, k < half, the
    embedding is ``[cos(t f_0), …, cos(t f_{half−1}), sin(t f_0), …, sin(t f_{half−1})]``, plus a zero column for odd
    ``dim``. These are the numbers of diffusers' ``get_timestep_embedding`` with ``flip_sin_to_cos=True,
    downscale_freq_shift=0`` (a test compares them), computed in the same order of operations.
    """
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    angles = timesteps[:, None].float() * torch.exp(exponent)[None]  # [B, half]
    emb = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    return nn.functional.pad(emb, (0, dim % 2))


class UViT(nn.Module):
    """U-ViT ``(x [B, C, H, W], timesteps [B], y [B] | None) -> ε̂ [B, C, H, W]`` (see the module docstring).

    Args:
        img_size: image side, a multiple of ``patch_size``.
        patch_size: patch side p (2 for 32 × 32 pixels and 32 × 32 × 4 latents in the reference).
        in_chans: image channels C (3 for pixels, 4 for Stable Diffusion's latents).
        embed_dim: token width D.
        depth: in + out blocks (even); the model has depth + 1 blocks with the mid block ("512 × 13" for the
            reference's U-ViT-S, depth 12).
        num_heads: attention heads.
        mlp_ratio: MLP hidden width over D.
        qkv_bias: bias on the q, k, v projection (off in the reference).
        mlp_time_embed: map the noise-level embedding through ``Linear → SiLU → Linear`` (off in the reference's
            CIFAR and ImageNet configs).
        num_classes: 0 for an unconditional model; otherwise the label embedding's rows. A model trained with
            label dropout has one row more, the "no label" class (``num_classes`` + 1 rows, the last one null).
        label_dropout: whether the label embedding has that extra null row (classifier-free guidance).
        conv: the final 3 × 3 convolution on the predicted image (the reference's default).
        skip: the long skips into the out blocks (False: a plain ViT of depth + 1 blocks, an ablation).
        shortcut: the α schedule (:data:`lab.shortcuts.SCHEDULES`); ``sublayer`` is the paper's.
        alpha_min: the last α of the decayed schedules (1 = the reference U-ViT; 0.7 is Table 4's).
        decay_on: the sub-layers the schedule applies to: ``both``, ``attn`` or ``mlp``.
        zero_init: start every block's branch output layers (``attn.proj``, ``mlp.fc2``) at zero, after the
            reference's initialisation: *Residual Connections Harm Generative Representation Learning* §3.2 does so
            for α_min <= 0.7, where the decayed shortcuts otherwise make the feature norm grow unstably (off: the
            reference U-ViT).
    """

    def __init__(self, img_size: int = 32, patch_size: int = 2, in_chans: int = 3, embed_dim: int = 512,
                 depth: int = 12, num_heads: int = 8, mlp_ratio: float = 4.0, qkv_bias: bool = False,
                 mlp_time_embed: bool = False, num_classes: int = 0, label_dropout: bool = False, conv: bool = True,
                 skip: bool = True, shortcut: str = "sublayer", alpha_min: float = 1.0, decay_on: str = "both",
                 zero_init: bool = False) -> None:
        super().__init__()
        from timm.layers import PatchEmbed, trunc_normal_  # imported here: timm takes seconds to import

        if depth < 0 or depth % 2:
            raise ValueError(f"U-ViT depth counts its in and out blocks and must be even and >= 0; got {depth}")
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0: unconditional); got {num_classes}")
        self.embed_dim, self.in_chans, self.patch_size = embed_dim, in_chans, patch_size
        self.num_classes, self.label_dropout = num_classes, bool(label_dropout and num_classes)
        self.shortcut_schedule, self.alpha_min = shortcut, alpha_min
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.grid_size: tuple[int, int] = tuple(self.patch_embed.grid_size)
        self.time_embed = (nn.Sequential(nn.Linear(embed_dim, 4 * embed_dim), nn.SiLU(),
                                         nn.Linear(4 * embed_dim, embed_dim)) if mlp_time_embed else nn.Identity())
        self.label_emb = (nn.Embedding(num_classes + self.label_dropout, embed_dim) if num_classes else None)
        self.extras = 2 if num_classes else 1  # the tokens before the patches: [label,] time
        self.pos_embed = nn.Parameter(torch.zeros(1, self.extras + math.prod(self.grid_size), embed_dim))

        half = depth // 2
        scales = sublayer_scales(shortcut, depth + 1, alpha_min, decay_on)  # in, mid, out: one α per sub-layer

        def block(a: float, m: float, b: float) -> DecayedBlock:
            return DecayedBlock(embed_dim, num_heads, mlp_ratio, a, m, b, qkv_bias=qkv_bias, zero_init=False,
                                norm_eps=1e-5)

        self.in_blocks = nn.ModuleList(block(*s) for s in scales[:half])
        self.mid_block = block(*scales[half])
        self.out_blocks = nn.ModuleList(block(*s) for s in scales[half + 1:])
        self.skip_linears = nn.ModuleList(nn.Linear(2 * embed_dim, embed_dim) for _ in range(half)) if skip else None
        self.norm = nn.LayerNorm(embed_dim)
        self.decoder_pred = nn.Linear(embed_dim, patch_size**2 * in_chans)
        self.final_layer = nn.Conv2d(in_chans, in_chans, 3, padding=1) if conv else nn.Identity()

        trunc_normal_(self.pos_embed, std=0.02)
        for m in self.modules():  # the reference's _init_weights (the convolutions keep PyTorch's default)
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init:  # after the reference's initialisation, which would overwrite it
            for _, b in self.iter_blocks():
                b.zero_init_()

    @property
    def null_class(self) -> int | None:
        """The label index meaning "no label" (classifier-free guidance), or None without label dropout."""
        return self.num_classes if self.label_dropout else None

    def no_weight_decay(self) -> set[str]:
        """The position embeddings are not decayed (the reference's ``no_weight_decay``)."""
        return {"pos_embed"}

    def iter_blocks(self) -> Iterator[tuple[str, DecayedBlock]]:
        """``(name, block)`` over the depth + 1 blocks in forward order: ``in_blocks.i``, ``mid_block``,
        ``out_blocks.j``."""
        for i, b in enumerate(self.in_blocks):
            yield f"in_blocks.{i}", b
        yield "mid_block", self.mid_block
        for j, b in enumerate(self.out_blocks):
            yield f"out_blocks.{j}", b

    def unpatchify(self, x: Tensor) -> Tensor:
        """``[B, N, p·p·C] -> [B, C, H, W]``, pixels (row, column, channel) within a patch (the reference's
        ``einops`` pattern ``B (h w) (p1 p2 C) -> B C (h p1) (w p2)``)."""
        (gh, gw), p, C = self.grid_size, self.patch_size, self.in_chans
        x = x.reshape(len(x), gh, gw, p, p, C)
        return torch.einsum("bhwpqc->bchpwq", x).reshape(len(x), C, gh * p, gw * p)

    def _tokens(self, x: Tensor, timesteps: Tensor, y: Tensor | None) -> Tensor:
        """h_0 ``[B, extras + N, D]``: [label,] time, then the patches, plus position embeddings."""
        patches = self.patch_embed(x)  # [B, N, D]
        time = self.time_embed(timestep_embedding(timesteps, self.embed_dim).to(patches.dtype))[:, None]
        tokens = [time, patches]
        if self.label_emb is not None:
            if y is None:
                raise ValueError("a class-conditional U-ViT needs labels y")
            tokens.insert(0, self.label_emb(y)[:, None])
        elif y is not None:
            raise ValueError("an unconditional U-ViT takes no labels")
        return torch.cat(tokens, dim=1) + self.pos_embed

    def _stream(self, x: Tensor, timesteps: Tensor, y: Tensor | None) -> Iterator[Tensor]:
        """Yields h_0, then each block's output (in blocks, mid, out blocks), ``[B, extras + N, D]``."""
        h = self._tokens(x, timesteps, y)
        yield h
        skips = []
        for b in self.in_blocks:
            h = b(h)
            skips.append(h)
            yield h
        h = self.mid_block(h)
        yield h
        for j, b in enumerate(self.out_blocks):
            if self.skip_linears is not None:
                h = self.skip_linears[j](torch.cat([h, skips.pop()], dim=-1))
            h = b(h)
            yield h

    def head(self, h: Tensor) -> Tensor:
        """The last state ``[B, extras + N, D]`` → the prediction ``[B, C, H, W]``."""
        patches = self.decoder_pred(self.norm(h))[:, self.extras:]
        return self.final_layer(self.unpatchify(patches))

    def forward(self, x: Tensor, timesteps: Tensor, y: Tensor | None = None) -> Tensor:
        """Predict the noise of ``x [B, C, H, W]`` at noise levels ``timesteps [B]`` (the reference feeds
        ``999 · t`` for the continuous time t ∈ [0, 1]), for labels ``y [B]`` when conditional."""
        h = last_state(self._stream(x, timesteps, y))
        return self.head(h)

    def forward_intermediates(self, x: Tensor, timesteps: Tensor, y: Tensor | None = None,
                              indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NLC", intermediates_only: bool = False
                              ) -> list[Tensor] | tuple[Tensor, list[Tensor]]:
        """The residual stream at the selected depths (:mod:`lab.nn.intermediates`: timm's meaning).

        Args:
            x: noisy images ``[B, C, H, W]``.
            timesteps: noise levels ``[B]``, as :meth:`forward` takes them.
            y: labels ``[B]`` of a conditional model.
            indices: states among h_0, …, h_{depth+1} (None: all depth + 2).
            norm: apply the final LayerNorm to each returned state.
            stop_early: with ``intermediates_only``, stop at the last selected state.
            output_fmt: ``NLC``: every token ``[B, extras + N, D]``; ``NCHW``: the patch tokens as a grid.
            intermediates_only: return only the states.

        Returns:
            ``(prediction [B, C, H, W], states)`` or only ``states``.
        """
        check_format(output_fmt, ("NLC", "NCHW"))
        count = len(self.in_blocks) + len(self.out_blocks) + 2
        states, last = collect(self._stream(x, timesteps, y), count, indices, stop_early and intermediates_only)
        if norm:
            states = [self.norm(h) for h in states]
        if output_fmt == "NCHW":
            states = [h[:, self.extras:].transpose(1, 2).reshape(len(h), h.shape[-1], *self.grid_size)
                      for h in states]
        return states if intermediates_only else (self.head(last), states)

    def extra_repr(self) -> str:
        return f"shortcut={self.shortcut_schedule}, alpha_min={self.alpha_min:g}, num_classes={self.num_classes}"
