"""The masked autoencoder of *Residual Connections Harm Generative Representation Learning*: an MAE ViT whose encoder
has decayed identity shortcuts, with U-Net skips from the encoder into the decoder.

MAE (He et al. 2022, *Masked Autoencoders Are Scalable Vision Learners*): patchify, keep a random 25 % of the patches,
encode them with a cls token, let a light decoder predict every patch from the encoding and mask tokens, and score
the prediction on the removed patches only. The paper's changes (§3.2, §4, Figure 7):

- **decayed shortcuts** in every encoder block, one α per residual sub-layer (:mod:`lab.nn.vit_block`); the decoder
  keeps standard blocks;
- **zero-initialised branch outputs** (§3.2), in the encoder and, as in the authors' released code, the decoder;
- **U-Net skips**: "we inject output from every other encoder layer into the corresponding decoder layer … injected
  encoder features are combined with learnable masked tokens before channel-wise concatenation" (§4).

Where the text leaves the U-Net open, this follows the authors' released code:

- Sources: the residual stream after every other block counted back from the last, h_L, h_{L−2}, h_{L−4}, … (h_{≥1};
  6 states for L = 12), deepest first: decoder block j fuses source j before it runs, so ViT-B's 8-block decoder
  fuses into blocks 0–5 and blocks 6–7 take none. ``decoder_depth`` must be at least the number of sources.
- Fusion (:class:`SkipFusion`): the visible tokens' state with a learned mask token (one per skip) unshuffled into
  every removed position, concatenated channel-wise with the decoder stream, then ``Linear → SiLU → Linear`` *added*
  to the decoder stream; the last Linear starts at zero, so every fusion starts as the identity on the stream.
- The decoder stream does not start from the encoder output: it starts from its own position embeddings (fixed
  sin-cos, a learned cls token in the cls slot) through ``decoder_embed`` (Linear D_dec → D_dec). So the encoder
  reaches the decoder through the skips alone, and an untrained model predicts the same patches for every image.
- No final encoder norm (``final_norm=None`` → off with U-Net skips): the released code has none, so the deepest
  source is h_L as the last block leaves it, and :meth:`MaskedAutoencoderViT.forward_features` reads h_L too.
  ``final_norm=True`` puts MAE's LayerNorm there (the lab's earlier choice, kept as an ablation under its name).
- ``decoder_pred`` (the last Linear, decoder width → pixels) starts at zero, as in the released code (with
  ``zero_init``), so an untrained model predicts the zero patch.

With ``unet_skips=False`` (Table 3a's "no U-Net" row) the decoder is MAE's: ``decoder_embed`` (Linear D → D_dec) of
norm(h_L), one shared mask token unshuffled into place, plus the decoder's position embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.registry import register_model, signature_of
from lab.nn.vit_block import DecayedBlock, sublayer_scales

__all__ = ["MaskedAutoencoderViT", "SkipFusion", "sincos_pos_embed_2d", "unshuffle"]

_EPS = 1e-6  # norm_pix_loss: target = (x − mean) / sqrt(var + eps), per patch (MAE)


def sincos_pos_embed_2d(dim: int, grid_size: tuple[int, int], cls_token: bool = True) -> Tensor:
    """MAE's fixed 2-D sin-cos position embeddings, ``[(1 +) gh·gw, dim]`` float32, patches in row-major order.

    The first dim/2 channels encode the column, the last dim/2 the row; each half is ``[sin(pos·ω), cos(pos·ω)]``
    with ω_k = 10000^(−k / (dim/4)), k < dim/4 (the layout of MAE's ``get_2d_sincos_pos_embed``, so MAE
    checkpoints load). The cls slot, first when ``cls_token``, is zeros.
    """
    if dim % 4:
        raise ValueError(f"sin-cos position embeddings need a width divisible by 4; got {dim}")
    gh, gw = grid_size
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim / 4))  # [dim/4]

    def encode(pos: Tensor) -> Tensor:  # [gh·gw] -> [gh·gw, dim/2]
        angle = pos[:, None] * omega[None]
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    rows, cols = torch.meshgrid(torch.arange(gh, dtype=torch.float64), torch.arange(gw, dtype=torch.float64),
                                indexing="ij")
    emb = torch.cat([encode(cols.flatten()), encode(rows.flatten())], dim=1)  # [gh·gw, dim]
    if cls_token:
        emb = torch.cat([emb.new_zeros(1, dim), emb])
    return emb.float()


def unshuffle(tokens: Tensor, ids_restore: Tensor, mask_token: Tensor) -> Tensor:
    """Put the visible tokens back in patch order, ``mask_token`` at every removed patch.

    Args:
        tokens: ``[B, 1 + K, D]``: cls, then the K kept patches in the shuffled order of
            :meth:`MaskedAutoencoderViT.random_masking`.
        ids_restore: ``[B, N]``, the inverse of that shuffle.
        mask_token: ``[1, 1, D]``.

    Returns:
        ``[B, 1 + N, D]``: cls, then all N patches in image order.
    """
    B, kept, D = tokens.shape
    fill = mask_token.expand(B, ids_restore.shape[1] + 1 - kept, D)  # [B, N − K, D]
    patches = torch.cat([tokens[:, 1:], fill], dim=1)  # shuffled order: kept first
    patches = torch.gather(patches, 1, ids_restore[..., None].expand(-1, -1, D))
    return torch.cat([tokens[:, :1], patches], dim=1)


class SkipFusion(nn.Module):
    """One U-Net skip: ``x + fc2(SiLU(fc1([unshuffle(skip) ‖ x])))``, ``fc2`` zero-initialised (identity at start).

    Args:
        enc_dim: encoder width D (the skip).
        dec_dim: decoder width D_dec (the stream).
    """

    def __init__(self, enc_dim: int, dec_dim: int) -> None:
        super().__init__()
        self.mask_token = nn.Parameter(torch.zeros(1, 1, enc_dim))  # stands in for the removed patches
        self.fc1 = nn.Linear(enc_dim + dec_dim, dec_dim)
        self.act = nn.SiLU()
        self.fc2 = nn.Linear(dec_dim, dec_dim)
        self.zero_init_()

    def zero_init_(self) -> None:
        """Zero the last Linear: the fusion passes the decoder stream through unchanged until it learns."""
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: Tensor, skip: Tensor, ids_restore: Tensor) -> Tensor:
        """Fuse one encoder state into the decoder stream.

        Args:
            x: the decoder stream ``[B, 1+N, D_dec]``.
            skip: the encoder state of the cls token and the K visible patches, ``[B, 1+K, D]``.
            ids_restore: ``[B, N]``, from the masking.

        Returns:
            The fused stream ``[B, 1+N, D_dec]``.
        """
        full = unshuffle(skip, ids_restore, self.mask_token)  # [B, 1+N, D]
        return x + self.fc2(self.act(self.fc1(torch.cat([full, x], dim=-1))))


class MaskedAutoencoderViT(nn.Module):
    """MAE with decayed encoder shortcuts and U-Net skips (see the module docstring).

    Training: ``loss, pred, mask = model(imgs)``. Analysis surface (no masking): the encoder blocks by name
    (:meth:`iter_blocks`), its residual stream (:meth:`forward_intermediates`), the probe's features
    (:meth:`forward_features`), and :meth:`reconstruct` for pictures like the paper's Figure 8.

    Args:
        img_size: image side (or ``(H, W)``), a multiple of ``patch_size``.
        patch_size: patch side p.
        in_chans: image channels C.
        embed_dim: encoder width D (divisible by 4 for the sin-cos embeddings).
        depth: encoder blocks L.
        num_heads: encoder attention heads.
        decoder_embed_dim: decoder width D_dec.
        decoder_depth: decoder blocks (at least ⌈L/2⌉ with U-Net skips).
        decoder_num_heads: decoder attention heads.
        mlp_ratio: MLP hidden width over the block width.
        mask_ratio: fraction of patches removed when ``forward`` is not given one (0.75 in MAE).
        norm_pix_loss: regress each patch's pixels normalised by the patch's mean and std (MAE; used in most of
            the paper's experiments, A.1).
        shortcut: α schedule of the encoder (:func:`lab.nn.vit_block.sublayer_scales`); ``sublayer`` is the
            paper's.
        alpha_min: the last α of the decayed schedules (1 = standard MAE; 0.6 is the paper's best for ViT-B).
        decay_on: encoder sub-layers the schedule applies to: ``both``, ``attn`` or ``mlp`` (Table 3b).
        unet_skips: fuse encoder states into the decoder; False is plain MAE's decoder (Table 3a).
        zero_init: zero the output layer of every block's attention and MLP branch (§3.2), and ``decoder_pred``
            (the released code). With shortcut ``none`` that makes the encoder output zeros with zero gradients:
            turn it off there.
        global_pool: what :meth:`forward_features` reads off norm(h_L): ``token`` (the cls token: MAE's linear
            probe, which the paper follows on ImageNet-1K (A.2), and the class tokens whose rank §6 measures) or
            ``avg`` (the mean over all tokens, class token included, as the authors' released probe averages).
        final_norm: a LayerNorm on the encoder output, read by the decoder and by :meth:`forward_features`. None
            follows each decoder's reference: off with U-Net skips (the authors' released code has no final
            encoder norm), on for plain MAE's decoder.
    """

    def __init__(self, img_size: int | tuple[int, int] = 224, patch_size: int = 16, in_chans: int = 3,
                 embed_dim: int = 768, depth: int = 12, num_heads: int = 12, decoder_embed_dim: int = 512,
                 decoder_depth: int = 8, decoder_num_heads: int = 16, mlp_ratio: float = 4.0,
                 mask_ratio: float = 0.75, norm_pix_loss: bool = True, shortcut: str = "sublayer",
                 alpha_min: float = 1.0, decay_on: str = "both", unet_skips: bool = True, zero_init: bool = True,
                 global_pool: str = "token", final_norm: bool | None = None) -> None:
        super().__init__()
        from timm.layers import PatchEmbed  # imported here: timm takes seconds to import

        _check_ratio(mask_ratio)
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg'; got {global_pool!r}")
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.patch_size, self.in_chans = patch_size, in_chans
        self.grid_size: tuple[int, int] = tuple(self.patch_embed.grid_size)
        self.num_patches = math.prod(self.grid_size)
        self.mask_ratio, self.norm_pix_loss, self.global_pool = mask_ratio, norm_pix_loss, global_pool
        self.shortcut_schedule, self.alpha_min, self.unet_skips = shortcut, alpha_min, unet_skips

        # encoder: [B, 1+K, D] residual stream, decayed shortcuts
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.register_buffer("pos_embed", sincos_pos_embed_2d(embed_dim, self.grid_size)[None])  # [1, 1+N, D], fixed
        self.blocks = nn.ModuleList(
            DecayedBlock(embed_dim, num_heads, mlp_ratio, a, m, b, zero_init=zero_init)
            for a, m, b in sublayer_scales(shortcut, depth, alpha_min, decay_on))
        self.final_norm = (not unet_skips) if final_norm is None else final_norm  # as each decoder's reference
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6) if self.final_norm else nn.Identity()

        # decoder: [B, 1+N, D_dec], standard blocks
        self.skip_sources: tuple[int, ...] = tuple(range(depth, 0, -2)) if unet_skips else (depth,)
        if unet_skips and decoder_depth < len(self.skip_sources):
            raise ValueError(f"U-Net skips from {len(self.skip_sources)} encoder states need decoder_depth >= "
                             f"{len(self.skip_sources)}; got {decoder_depth}")
        if unet_skips:
            self.decoder_cls_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
            self.decoder_embed = nn.Linear(decoder_embed_dim, decoder_embed_dim)  # of the position embeddings
            self.fusions = nn.ModuleList(SkipFusion(embed_dim, decoder_embed_dim) for _ in self.skip_sources)
        else:
            self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
            self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim)  # of the encoder output
            self.fusions = nn.ModuleList()
        self.register_buffer("decoder_pos_embed", sincos_pos_embed_2d(decoder_embed_dim, self.grid_size)[None])
        self.decoder_blocks = nn.ModuleList(
            DecayedBlock(decoder_embed_dim, decoder_num_heads, mlp_ratio, zero_init=zero_init)
            for _ in range(decoder_depth))
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size**2 * in_chans)
        self._init_weights(zero_init)

    def _init_weights(self, zero_init: bool) -> None:
        """MAE's initialisation (Xavier-uniform linear layers and patch projection, N(0, 0.02) tokens), then zeros."""
        w = self.patch_embed.proj.weight
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))  # as a Linear over the flattened patch
        tokens = [getattr(self, n) for n in ("cls_token", "decoder_cls_token", "mask_token") if hasattr(self, n)]
        for p in tokens + [f.mask_token for f in self.fusions]:
            nn.init.normal_(p, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init:
            for block in [*self.blocks, *self.decoder_blocks]:
                block.zero_init_()
            nn.init.zeros_(self.decoder_pred.weight)  # the released code's decoder_pred starts at zero
        for fusion in self.fusions:
            fusion.zero_init_()

    # ------------------------------------------------------------------ patches and masking

    def patchify(self, imgs: Tensor) -> Tensor:
        """``[B, C, H, W] -> [B, N, p*p*C]``, patches row-major, pixels (row, column, channel) within a patch."""
        B, C = imgs.shape[:2]
        (gh, gw), p = self.grid_size, self.patch_size
        x = imgs.reshape(B, C, gh, p, gw, p)
        return torch.einsum("bchpwq->bhwpqc", x).reshape(B, gh * gw, p * p * C)

    def unpatchify(self, x: Tensor) -> Tensor:
        """``[B, N, p*p*C] -> [B, C, H, W]``, the inverse of :meth:`patchify`."""
        (gh, gw), p, C = self.grid_size, self.patch_size, self.in_chans
        x = x.reshape(len(x), gh, gw, p, p, C)
        return torch.einsum("bhwpqc->bchpwq", x).reshape(len(x), C, gh * p, gw * p)

    @staticmethod
    def random_masking(x: Tensor, mask_ratio: float,
                       generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Keep K = round(N·(1 − mask_ratio)) patches per sample, a uniformly random subset for each.

        Per-sample shuffle by argsort of uniform noise, as MAE does (MAE truncates N·(1 − ratio) with ``int``;
        rounding differs only when floating point lands just below an integer).

        Args:
            x: ``[B, N, D]`` patch tokens.
            mask_ratio: fraction removed, in [0, 1).
            generator: source of the noise (default: the global RNG), e.g. to show two models the same masks.

        Returns:
            ``x_masked [B, K, D]`` (kept tokens, shuffled order), ``mask [B, N]`` (1 = removed, in patch order),
            ``ids_restore [B, N]`` (un-shuffles the kept-first order).
        """
        _check_ratio(mask_ratio)
        B, N, D = x.shape
        keep = round(N * (1 - mask_ratio))
        noise = torch.rand(B, N, device=x.device, generator=generator)  # small noise = kept
        ids_shuffle = noise.argsort(dim=1)
        ids_restore = ids_shuffle.argsort(dim=1)
        x_masked = torch.gather(x, 1, ids_shuffle[:, :keep, None].expand(-1, -1, D))
        mask = torch.ones(B, N, device=x.device, dtype=x.dtype)
        mask[:, :keep] = 0
        return x_masked, torch.gather(mask, 1, ids_restore), ids_restore

    # ------------------------------------------------------------------ pretraining

    def _patch_tokens(self, imgs: Tensor) -> Tensor:
        """``[B, C, H, W] -> [B, N, D]``: patch embeddings plus position embeddings."""
        return self.patch_embed(imgs) + self.pos_embed[:, 1:]

    def _prepend_cls(self, x: Tensor) -> Tensor:
        """``[B, K, D] -> [B, 1+K, D]``: the cls token (with its position embedding) first."""
        cls = (self.cls_token + self.pos_embed[:, :1]).expand(len(x), -1, -1)
        return torch.cat([cls, x], dim=1)

    def forward_encoder(self, imgs: Tensor, mask_ratio: float,
                        generator: torch.Generator | None = None) -> tuple[list[Tensor], Tensor, Tensor]:
        """Encode the visible patches.

        Returns:
            ``features``: the states the decoder reads, one per :attr:`skip_sources` (deepest first), each
            ``[B, 1+K, D]``: norm(h_L) (h_L itself without a final norm), then h_{L−2}, h_{L−4}, … with U-Net
            skips; ``mask [B, N]``;
            ``ids_restore [B, N]``.
        """
        x, mask, ids_restore = self.random_masking(self._patch_tokens(imgs), mask_ratio, generator)
        h = self._prepend_cls(x)  # h_0, [B, 1+K, D]
        taps: dict[int, Tensor] = {}
        for i, block in enumerate(self.blocks, start=1):
            h = block(h)  # h_i
            if i in self.skip_sources:
                taps[i] = h
        taps[len(self.blocks)] = self.norm(h)  # the deepest source: h_L, or norm(h_L) with a final norm
        return [taps[i] for i in self.skip_sources], mask, ids_restore

    def forward_decoder(self, features: list[Tensor], ids_restore: Tensor) -> Tensor:
        """Predict every patch: ``features`` of :meth:`forward_encoder`, ``ids_restore [B, N]`` → ``[B, N, p*p*C]``."""
        if len(features) != len(self.skip_sources):
            raise ValueError(f"expected {len(self.skip_sources)} encoder states, got {len(features)}")
        if self.unet_skips:  # the stream starts from the decoder's position embeddings; the encoder enters by skips
            start = torch.cat([self.decoder_cls_token, self.decoder_pos_embed[:, 1:]], dim=1)  # [1, 1+N, D_dec]
            x = self.decoder_embed(start).expand(len(ids_restore), -1, -1)
        else:  # MAE: the encoder output, mask tokens in place, position embeddings
            x = unshuffle(self.decoder_embed(features[0]), ids_restore, self.mask_token) + self.decoder_pos_embed
        for j, block in enumerate(self.decoder_blocks):
            if j < len(self.fusions):
                x = self.fusions[j](x, features[j], ids_restore)
            x = block(x)
        return self.decoder_pred(self.decoder_norm(x))[:, 1:]  # drop cls: [B, N, p*p*C]

    def _target(self, imgs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(target, mean, std)``: patches ``[B, N, p*p*C]``, per-patch normalised if ``norm_pix_loss``."""
        target = self.patchify(imgs)
        if not self.norm_pix_loss:
            return target, target.new_zeros(()), target.new_ones(())
        mean, std = target.mean(dim=-1, keepdim=True), (target.var(dim=-1, keepdim=True) + _EPS).sqrt()
        return (target - mean) / std, mean, std

    def forward_loss(self, imgs: Tensor, pred: Tensor, mask: Tensor) -> Tensor:
        """Mean squared error per patch, averaged over the removed patches only (``mask [B, N]``, 1 = removed)."""
        target, _, _ = self._target(imgs)
        per_patch = (pred - target).pow(2).mean(dim=-1)  # [B, N]
        return (per_patch * mask).sum() / mask.sum().clamp_min(1)  # 0 when nothing is removed

    def forward(self, imgs: Tensor, mask_ratio: float | None = None, *,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``imgs [B, C, H, W]`` → ``(loss, pred [B, N, p*p*C], mask [B, N])``, as MAE's ``forward``.

        ``mask_ratio`` defaults to the model's; ``generator`` draws the masks.
        """
        ratio = self.mask_ratio if mask_ratio is None else mask_ratio
        features, mask, ids_restore = self.forward_encoder(imgs, ratio, generator)
        pred = self.forward_decoder(features, ids_restore)
        return self.forward_loss(imgs, pred, mask), pred, mask

    @torch.no_grad()
    def reconstruct(self, imgs: Tensor, mask_ratio: float | None = None, *, generator: torch.Generator | None = None,
                    return_mask: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Images ``[B, C, H, W]``: the prediction at the removed patches, the input at the visible ones.

        With ``norm_pix_loss`` the prediction is per-patch normalised; it is mapped back with each true patch's mean
        and std (as MAE's visualisations do), so the picture shows predicted structure, not predicted brightness.
        With ``return_mask``, also ``mask [B, N]`` (1 = removed) for the masked-input row of a figure.
        """
        _, pred, mask = self(imgs, mask_ratio, generator=generator)
        _, mean, std = self._target(imgs)
        patches = torch.where(mask[..., None].bool(), pred * std + mean, self.patchify(imgs))
        out = self.unpatchify(patches)
        return (out, mask) if return_mask else out

    # ------------------------------------------------------------------ analysis surface (all patches, no masking)

    def iter_blocks(self) -> Iterator[tuple[str, DecayedBlock]]:
        """``("blocks.{i}", block)`` over the encoder blocks, in forward order."""
        for i, block in enumerate(self.blocks):
            yield f"blocks.{i}", block

    def no_weight_decay(self) -> set[str]:
        """Parameters never decayed beyond timm's rule (which spares biases and norms): none. The cls and mask
        tokens are decayed, as in the MAE reference code; the position embeddings are fixed buffers."""
        return set()

    def _stream(self, x: Tensor) -> Iterator[Tensor]:
        """Yields h_0 (patch and position embeddings with the cls token), then each block's output, ``[B, 1+N, D]``."""
        h = self._prepend_cls(self._patch_tokens(x))
        yield h
        for block in self.blocks:
            h = block(h)
            yield h

    def forward_intermediates(self, x: Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NLC", intermediates_only: bool = False
                              ) -> list[Tensor] | tuple[Tensor, list[Tensor]]:
        """The encoder's residual stream on every patch (no masking), at the selected depths
        (:mod:`lab.nn.intermediates`: timm's meaning).

        Args:
            x: images ``[B, C, H, W]``.
            indices: states to return among h_0, …, h_L (None: all L + 1).
            norm: apply the final norm to each returned state (timm's ViT).
            stop_early: with ``intermediates_only``, stop at the last selected state.
            output_fmt: ``NLC``: tokens ``[B, 1+N, D]``, cls first (the default here, unlike timm's ViT: the
                analyses read the cls token); ``NCHW``: the patch tokens as a grid ``[B, D, H/p, W/p]``.
            intermediates_only: return only the states.

        Returns:
            ``(features [B, D], states)`` with the features of :meth:`forward_features` (the model has no head), or
            only ``states``: h_0 = patch and position embeddings with the cls token, h_{i+1} = block i's output.
        """
        check_format(output_fmt, ("NLC", "NCHW"))
        states, last = collect(self._stream(x), len(self.blocks) + 1, indices, stop_early and intermediates_only)
        if norm:
            states = [self.norm(h) for h in states]
        if output_fmt == "NCHW":
            states = [h[:, 1:].transpose(1, 2).reshape(len(h), h.shape[-1], *self.grid_size) for h in states]
        return states if intermediates_only else (self.pool_features(last), states)

    def pool_features(self, h: Tensor) -> Tensor:
        """h_L ``[B, 1+N, D]`` → ``[B, D]``: the final LayerNorm, then the cls token (or the token mean)."""
        h = self.norm(h)
        return h[:, 0] if self.global_pool == "token" else h.mean(dim=1)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, C, H, W] -> [B, D]``: the bottleneck features a linear probe reads (see ``global_pool``)."""
        h = last_state(self._stream(x))
        return self.pool_features(h)


def _check_ratio(mask_ratio: float) -> None:
    if not 0.0 <= mask_ratio < 1.0:
        raise ValueError(f"mask_ratio must be in [0, 1); got {mask_ratio}")


# ---------------------------------------------------------------------- registered sizes
_MAE_DECODER = {"decoder_embed_dim": 512, "decoder_depth": 8, "decoder_num_heads": 16}  # MAE's ViT-B decoder
_TINY = {"embed_dim": 192, "depth": 12, "num_heads": 3, **_MAE_DECODER}
_SMALL = {"embed_dim": 384, "depth": 12, "num_heads": 6, **_MAE_DECODER}
_BASE = {"embed_dim": 768, "depth": 12, "num_heads": 12, **_MAE_DECODER}
_TINY_32 = {"img_size": 32, "embed_dim": 192, "depth": 12, "num_heads": 3, "decoder_embed_dim": 128,
            "decoder_depth": 6, "decoder_num_heads": 4}


def _build(patch_size: int, defaults: dict, overrides: dict) -> MaskedAutoencoderViT:
    return MaskedAutoencoderViT(patch_size=patch_size, **{**defaults, **overrides})


_EXAMPLE = {"img_size": 16, "embed_dim": 16, "depth": 3, "num_heads": 2, "decoder_embed_dim": 8, "decoder_depth": 2,
            "decoder_num_heads": 2}
"""A small instance for the tests that build every registered model."""


@register_model(family="mae_vit", task="mae", example=_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(MaskedAutoencoderViT, drop=("patch_size",), **_TINY)
def mae_vit_tiny_patch16(**kwargs) -> MaskedAutoencoderViT:
    """MAE ViT-Ti/16 at 224 × 224 (192 wide, 12 blocks, 3 heads), MAE's decoder (512 wide, 8 blocks, 16 heads)."""
    return _build(16, _TINY, kwargs)


@register_model(family="mae_vit", task="mae", example=_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(MaskedAutoencoderViT, drop=("patch_size",), **_SMALL)
def mae_vit_small_patch16(**kwargs) -> MaskedAutoencoderViT:
    """MAE ViT-S/16 at 224 × 224 (384 wide, 12 blocks, 6 heads), MAE's decoder: the paper's ViT-S/16 (Table 2)."""
    return _build(16, _SMALL, kwargs)


@register_model(family="mae_vit", task="mae", example=_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(MaskedAutoencoderViT, drop=("patch_size",), **_BASE)
def mae_vit_base_patch16(**kwargs) -> MaskedAutoencoderViT:
    """MAE ViT-B/16 at 224 × 224 (768 wide, 12 blocks, 12 heads), MAE's decoder: the paper's main model."""
    return _build(16, _BASE, kwargs)


@register_model(family="mae_vit", task="mae", example=_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(MaskedAutoencoderViT, drop=("patch_size",), **_TINY_32)
def mae_vit_tiny_patch4_32(**kwargs) -> MaskedAutoencoderViT:
    """MAE ViT-Ti for CIFAR-sized images: 32 × 32 in 4 × 4 patches (64 tokens), 192 wide, 12 blocks, 3 heads;
    a small decoder (128 wide, 6 blocks — one per U-Net skip —, 4 heads)."""
    return _build(4, _TINY_32, kwargs)
