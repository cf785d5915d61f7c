"""The ResNets of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* (§2.1), sized for a CPU.

Built from :class:`ResidualBlock`; the paper's types:

================  ============================================================================================
``ra_type1``      16 fully-connected basic blocks of width D = 512 (a "fully-connected ResNet34").
``ra_type2``      16 convolutional basic blocks, 64 channels at 16 × 16 (a "convolutional ResNet34").
``ra_type3``      Type 2 with the last 8 blocks at 128 channels, 8 × 8; the downsampling between the two stages
                  is a *transition* (strided conv), not a residual block, so every analysed block maps a space
                  to itself and its residual Jacobian is square.
``ra_type4a/4b``  Type 1 with 8 blocks, with (a) and without (b: shortcut ``none``) skip connections.
``ra_type5a/5b``  Type 2 with 8 blocks, with and without skip connections.
================  ============================================================================================

Every block is ``h_{i+1} = post_act(α_i h_i + β_i · drop_path(F_i(h_i)))``. The paper's ResNets are standard,
post-activation ones (He et al. 2016a: ``F = Linear/conv → BN → ReLU → Linear/conv → BN``, ``post_act = ReLU``);
``preact=True`` gives the pre-activation form (``F = BN → ReLU → layer → BN → ReLU → layer``, no ``post_act``
(None), a final BN → ReLU before pooling), the setting of Theorem 3.1. Widths, depths, channels and the
working resolution are knobs, so the same types train on 8 × 8 digits on a laptop and on CIFAR at full size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn

from lab.nn.block import ResidualBlock
from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.mlp import make_activation
from lab.nn.registry import register_model, signature_of
from lab.shortcuts import block_scales


def _norm(kind: str, dim: int, conv: bool) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(dim) if conv else nn.BatchNorm1d(dim)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}; valid: batch, none")


def _layer(dim: int, conv: bool, bias: bool, stride: int = 1, out_dim: int | None = None) -> nn.Module:
    """A 3 × 3 convolution (padding 1) or a linear layer, ``dim -> out_dim``."""
    out_dim = dim if out_dim is None else out_dim
    if conv:
        return nn.Conv2d(dim, out_dim, 3, stride=stride, padding=1, bias=bias)
    return nn.Linear(dim, out_dim, bias=bias)


class BasicBranch(nn.Sequential):
    """F of a basic residual block: two linear (``[B, D] -> [B, D]``) or 3 × 3 conv (``[B, C, H, W]``) layers.

    Post-activation (default): ``layer → norm → act → layer → norm`` (ResNet's basic block; the post-sum ReLU
    lives in the block). Pre-activation: ``norm → act → layer → norm → act → layer``. A layer followed by a norm
    has no bias (the norm's shift replaces it). The last module is the branch's output layer.

    Args:
        dim: width D (linear) or channels C (conv).
        conv: 3 × 3 convolutions instead of linear layers.
        preact: pre-activation ordering.
        norm: ``"batch"`` or ``"none"``.
        activation: activation name (:func:`lab.nn.mlp.make_activation`).
    """

    def __init__(self, dim: int, conv: bool = False, preact: bool = False, norm: str = "batch",
                 activation: str = "relu") -> None:
        with_norm = norm != "none"
        if preact:
            parts = [_norm(norm, dim, conv), make_activation(activation), _layer(dim, conv, bias=not with_norm),
                     _norm(norm, dim, conv), make_activation(activation), _layer(dim, conv, bias=True)]
        else:
            parts = [_layer(dim, conv, bias=not with_norm), _norm(norm, dim, conv), make_activation(activation),
                     _layer(dim, conv, bias=not with_norm), _norm(norm, dim, conv)]
        super().__init__(*(p for p in parts if not isinstance(p, nn.Identity)))  # norm="none" leaves no trace

    def zero_init_(self) -> None:
        """Make F ≡ 0 at initialisation (*Residual Connections Harm Generative Representation Learning* §3.2).

        Zeroes the output layer (the last norm's scale and shift, or the last layer's weight and bias), so each block
        starts as its (scaled) shortcut."""
        for module in reversed(self):
            params = [p for p in (getattr(module, "weight", None), getattr(module, "bias", None)) if p is not None]
            if params:
                for p in params:
                    nn.init.zeros_(p)
                return


class ResNet(nn.Module):
    """``stem → blocks (with transitions between stages) → final norm → pool → head``.

    The residual stream h_i is block i's input; h_0 is the stem's output. A transition (between stages of
    different width or resolution) is applied to the previous block's output before it enters the next stage, and
    is not one of the analysed blocks.

    Args:
        stem: input → h_0.
        blocks: the residual blocks, in forward order.
        transitions: ``{i: module}`` applied just before block i.
        final: applied to h_L before pooling (BN → act for pre-activation nets, identity otherwise).
        pool: h_L → features ``[B, F]`` (global average pooling for conv nets, identity for FC nets).
        head: features → logits ``[B, C]``.
    """

    def __init__(self, stem: nn.Module, blocks: Sequence[ResidualBlock], head: nn.Module,
                 transitions: dict[int, nn.Module] | None = None, final: nn.Module | None = None,
                 pool: nn.Module | None = None) -> None:
        super().__init__()
        self.stem = stem
        self.blocks = nn.ModuleList(blocks)
        self.transitions = nn.ModuleDict({str(i): m for i, m in (transitions or {}).items()})
        self.final = final if final is not None else nn.Identity()
        self.pool = pool if pool is not None else nn.Identity()
        self.head = head
        self.num_classes = head.out_features

    def iter_blocks(self) -> Iterator[tuple[str, ResidualBlock]]:
        """``("blocks.{i}", block)`` in forward order (transitions are not blocks)."""
        for i, block in enumerate(self.blocks):
            yield f"blocks.{i}", block

    def _stream(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        """Yields h_0, …, h_{L-1} (each block's input, after any transition), then h_L."""
        h = self.stem(x)
        for i, block in enumerate(self.blocks):
            if str(i) in self.transitions:
                h = self.transitions[str(i)](h)
            yield h
            h = block(h)
        yield h

    def pool_features(self, h: torch.Tensor) -> torch.Tensor:
        """h_L ``[B, D]`` or ``[B, C, H, W]`` → pooled features ``[B, F]``."""
        return self.pool(self.final(h))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Input → pooled features ``[B, F]`` of the last block's output."""
        h = last_state(self._stream(x))
        return self.pool_features(h)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, F] -> [B, C]`` logits."""
        return self.head(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def no_weight_decay(self) -> set[str]:
        """Parameters never decayed beyond timm's rule (which spares biases and norms): none."""
        return set()

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NCHW", intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """The residual stream at the selected depths (:mod:`lab.nn.intermediates`: timm's meaning).

        Args:
            x: ``[B, in_dim]`` or ``[B, C, H, W]``.
            indices: states to return among h_0, …, h_L (None: all L + 1).
            norm: accepted for timm's signature and, as in timm's ResNet, not applied (a pre-activation net's final
                norm belongs to :meth:`pool_features`).
            stop_early: with ``intermediates_only``, stop at the last selected state.
            output_fmt: ``NCHW`` (states of the fully-connected nets are ``[B, D]``: they have no spatial axes).
            intermediates_only: return only the states.

        Returns:
            ``(features [B, F], states)`` with the pooled features of :meth:`forward_features` (``forward_head``
            maps them to logits), or only ``states``: h_i = block i's input (where a transition precedes block i,
            the transition's output) and h_L = the last block's output, ``[B, D]`` or ``[B, C, H, W]``.
        """
        check_format(output_fmt, ("NCHW",))
        states, last = collect(self._stream(x), len(self.blocks) + 1, indices, stop_early and intermediates_only)
        return states if intermediates_only else (self.pool_features(last), states)


def _blocks(dims: Sequence[int], conv: bool, preact: bool, norm: str, activation: str, shortcut: str,
            alpha_min: float, drop_path_rate: float, zero_init: bool) -> list[ResidualBlock]:
    """One basic block per entry of ``dims`` (its width), α/β from the schedule over all of them."""
    blocks = []
    for dim, (alpha, beta) in zip(dims, block_scales(shortcut, len(dims), alpha_min), strict=True):
        branch = BasicBranch(dim, conv, preact, norm, activation)
        if zero_init:
            branch.zero_init_()
        post_act = None if preact else make_activation(activation)
        blocks.append(ResidualBlock(branch, alpha, beta, drop_path_rate, post_act))
    return blocks


def _final(preact: bool, norm: str, dim: int, conv: bool, activation: str) -> nn.Module | None:
    """Pre-activation nets end with norm → act before pooling (the last block's output is un-normalised)."""
    return nn.Sequential(_norm(norm, dim, conv), make_activation(activation)) if preact else None


def _entry(preact: bool, norm: str, dim: int, conv: bool, activation: str) -> list[nn.Module]:
    """What follows a stem or transition layer: norm → act for post-activation nets, nothing for pre-activation
    ones (their blocks normalise their own input)."""
    return [] if preact else [_norm(norm, dim, conv), make_activation(activation)]


class FCResNet(ResNet):
    """Fully-connected ResNet (Residual Alignment Types 1 and 4): flatten → linear stem → ``depth`` FC blocks → head.

    Accepts flat ``[B, in_dim]`` or image ``[B, C, H, W]`` input (flattened to ``in_dim = C·H·W``).

    Args:
        depth: number of residual blocks L (16 for Type 1, 8 for Type 4).
        width: width D of the residual stream (512 in the paper).
        in_dim: input dimension after flattening (64 for 8 × 8 digits, 784 for MNIST, 3072 for CIFAR).
        num_classes: number of classes C.
        preact: pre-activation blocks (default: post-activation, as the paper's ResNets).
        activation: activation inside the branch and after the sum.
        norm: ``"batch"`` (BatchNorm1d) or ``"none"``.
        shortcut: α schedule (:mod:`lab.shortcuts`); ``none`` removes the skip connections (Type 4b).
        alpha_min: last α of the decayed schedules.
        zero_init: zero-initialise every branch's output layer.
        drop_path_rate: per-sample drop probability of every branch (stochastic depth; the paper's Fig. 5 uses
            0.3).
    """

    def __init__(self, depth: int = 16, width: int = 512, in_dim: int = 64, num_classes: int = 10,
                 preact: bool = False, activation: str = "relu", norm: str = "batch", shortcut: str = "identity",
                 alpha_min: float = 1.0, zero_init: bool = False, drop_path_rate: float = 0.0) -> None:
        if depth < 1 or width < 1:
            raise ValueError(f"depth and width must be >= 1; got depth={depth}, width={width}")
        stem = nn.Sequential(nn.Flatten(), nn.Linear(in_dim, width, bias=norm == "none" or preact),
                             *_entry(preact, norm, width, False, activation))
        blocks = _blocks([width] * depth, False, preact, norm, activation, shortcut, alpha_min, drop_path_rate,
                         zero_init)
        super().__init__(stem, blocks, nn.Linear(width, num_classes),
                         final=_final(preact, norm, width, False, activation))
        self.depth, self.width, self.preact = depth, width, preact
        self.shortcut_schedule, self.alpha_min = shortcut, alpha_min


class ConvResNet(ResNet):
    """Convolutional ResNet (Residual Alignment Types 2, 3 and 5): conv stem → stages of conv blocks → pool → head.

    The stem is a 3 × 3 conv (→ BN → act for post-activation nets) followed by adaptive average pooling to
    ``feature_size`` (e.g. 32 × 32 CIFAR → 16 × 16), so every stage-1 block works at that resolution whatever the
    image size. Each later stage starts with a transition: a stride-2 3 × 3 conv to its channel count (→ BN → act;
    pre-activation nets use BN → act → conv), halving the resolution.

    Args:
        depths: blocks per stage ((16,) for Type 2, (8, 8) for Type 3, (8,) for Type 5).
        channels: channels per stage ((64,), (64, 128), (64,)).
        in_chans: input channels (1 for digits/MNIST, 3 for CIFAR).
        feature_size: spatial size of stage 1 (16 in the paper); None keeps the input resolution.
        num_classes: number of classes C.
        preact, activation, norm, shortcut, alpha_min, zero_init, drop_path_rate: as :class:`FCResNet`; the α schedule
            runs over all blocks of all stages.
    """

    def __init__(self, depths: Sequence[int] = (16,), channels: Sequence[int] = (64,), in_chans: int = 3,
                 feature_size: int | None = 16, num_classes: int = 10, preact: bool = False,
                 activation: str = "relu", norm: str = "batch", shortcut: str = "identity", alpha_min: float = 1.0,
                 zero_init: bool = False, drop_path_rate: float = 0.0) -> None:
        depths, channels = tuple(depths), tuple(channels)
        if len(depths) != len(channels) or not depths or min(depths) < 1 or min(channels) < 1:
            raise ValueError(f"need one depth >= 1 per stage and as many channel counts; got {depths}, {channels}")
        with_norm = norm != "none"
        stem = [nn.Conv2d(in_chans, channels[0], 3, padding=1, bias=not with_norm or preact),
                *_entry(preact, norm, channels[0], True, activation)]
        if feature_size is not None:
            stem.append(nn.AdaptiveAvgPool2d(feature_size))
        dims = [c for d, c in zip(depths, channels, strict=True) for _ in range(d)]
        blocks = _blocks(dims, True, preact, norm, activation, shortcut, alpha_min, drop_path_rate, zero_init)
        transitions = {}
        for s in range(1, len(depths)):  # before the first block of stage s
            down = _layer(channels[s - 1], True, bias=not with_norm or preact, stride=2, out_dim=channels[s])
            pre = [_norm(norm, channels[s - 1], True), make_activation(activation)] if preact else []
            post = _entry(preact, norm, channels[s], True, activation)
            transitions[sum(depths[:s])] = nn.Sequential(*pre, down, *post)
        pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        super().__init__(nn.Sequential(*stem), blocks, nn.Linear(channels[-1], num_classes), transitions,
                         _final(preact, norm, channels[-1], True, activation), pool)
        self.depths, self.channels, self.preact = depths, channels, preact
        self.shortcut_schedule, self.alpha_min = shortcut, alpha_min


_FC_EXAMPLE = {"depth": 3, "width": 8, "num_classes": 3, "in_dim": 12}
_CONV_EXAMPLE = {"depths": (2, 1), "channels": (4, 8), "in_chans": 3, "feature_size": 8, "num_classes": 3}
"""Small instances for the tests that build every registered model."""


@register_model(family="resnet", example=_FC_EXAMPLE, input_shape=(12,))
@signature_of(FCResNet)
def fc_resnet(**kwargs) -> FCResNet:
    """Fully-connected ResNet; defaults are the Residual Alignment paper's Type 1 (16 blocks, D = 512), 8 × 8 input."""
    return FCResNet(**kwargs)


@register_model(family="resnet", example=_CONV_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(ConvResNet)
def conv_resnet(**kwargs) -> ConvResNet:
    """Convolutional ResNet; defaults are the Residual Alignment paper's Type 2 (16 blocks, 64 channels at 16 × 16)."""
    return ConvResNet(**kwargs)


@register_model(family="resnet", example=_FC_EXAMPLE, input_shape=(3, 2, 2))
@signature_of(FCResNet, depth=16, width=512)
def ra_type1(**kwargs) -> FCResNet:
    """Residual Alignment Type 1: 16 FC basic blocks, D = 512."""
    return FCResNet(**{"depth": 16, "width": 512, **kwargs})


@register_model(family="resnet", example=_FC_EXAMPLE, input_shape=(12,))
@signature_of(FCResNet, depth=8, width=512)
def ra_type4a(**kwargs) -> FCResNet:
    """Residual Alignment Type 4a: Type 1 with 8 blocks."""
    return FCResNet(**{"depth": 8, "width": 512, **kwargs})


@register_model(family="resnet", example=_FC_EXAMPLE, input_shape=(12,))
@signature_of(FCResNet, depth=8, width=512, shortcut="none")
def ra_type4b(**kwargs) -> FCResNet:
    """Residual Alignment Type 4b: Type 4a without skip connections (shortcut ``none``)."""
    return FCResNet(**{"depth": 8, "width": 512, "shortcut": "none", **kwargs})


@register_model(family="resnet", example=_CONV_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(ConvResNet, depths=(16,), channels=(64,), feature_size=16)
def ra_type2(**kwargs) -> ConvResNet:
    """Residual Alignment Type 2: 16 conv basic blocks, 64 channels at 16 × 16."""
    return ConvResNet(**{"depths": (16,), "channels": (64,), "feature_size": 16, **kwargs})


@register_model(family="resnet", example=_CONV_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(ConvResNet, depths=(8, 8), channels=(64, 128), feature_size=16)
def ra_type3(**kwargs) -> ConvResNet:
    """Residual Alignment Type 3: 8 blocks at 64 channels, 16 × 16, then 8 at 128 channels, 8 × 8."""
    return ConvResNet(**{"depths": (8, 8), "channels": (64, 128), "feature_size": 16, **kwargs})


@register_model(family="resnet", example=_CONV_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(ConvResNet, depths=(8,), channels=(64,), feature_size=16)
def ra_type5a(**kwargs) -> ConvResNet:
    """Residual Alignment Type 5a: Type 2 with 8 blocks."""
    return ConvResNet(**{"depths": (8,), "channels": (64,), "feature_size": 16, **kwargs})


@register_model(family="resnet", example=_CONV_EXAMPLE, input_shape=(3, 16, 16))
@signature_of(ConvResNet, depths=(8,), channels=(64,), feature_size=16, shortcut="none")
def ra_type5b(**kwargs) -> ConvResNet:
    """Residual Alignment Type 5b: Type 5a without skip connections (shortcut ``none``)."""
    return ConvResNet(**{"depths": (8,), "channels": (64,), "feature_size": 16, "shortcut": "none", **kwargs})
