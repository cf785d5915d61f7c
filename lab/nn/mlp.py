"""A residual MLP: 2-D input → width-H stem → L residual blocks (Linear + activation) → head.

The model of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections* §3.1. With a decoder and long
skips it is also the lab's toy analogue of the MAE of *Residual Connections Harm Generative Representation Learning*
(§3.2, its Figure 7): an encoder whose shortcuts decay, a decoder whose shortcuts stay at α = 1, and U-Net skips that
carry each encoder state to the mirrored decoder block, so the bottleneck need not keep every pixel.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from lab.nn.block import ResidualBlock
from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.registry import register_model, signature_of
from lab.shortcuts import block_scales

_ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh, "identity": nn.Identity}
_FUNCTIONS = {"gelu": F.gelu, "relu": F.relu, "tanh": torch.tanh, "identity": lambda x: x}
ACTIVATIONS = tuple(_ACTIVATIONS)


def make_activation(name: str) -> nn.Module:
    """An activation module by name (gelu, relu, tanh, identity)."""
    if name not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; valid: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]()


class MLPBranch(nn.Module):
    """F(x) = act(fc(x)), ``[B, H] -> [B, H]``; ``fc`` is the branch's output layer (zero-initialisable).

    The activation is applied as a function, not a submodule: 32 blocks × a module call each is measurable
    in the toy models' step time.
    """

    def __init__(self, width: int, activation: str = "gelu") -> None:
        super().__init__()
        if activation not in _FUNCTIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(_FUNCTIONS)}")
        self.fc = nn.Linear(width, width)
        self.activation = activation
        self._act = _FUNCTIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._act(self.fc(x))

    def extra_repr(self) -> str:
        return f"activation={self.activation}"

    def zero_init_(self) -> None:
        """Zero the output layer so the block starts as its (scaled) shortcut.

        As in *Residual Connections Harm Generative Representation Learning* §3.2.
        """
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)


def skip_sources(encoder: int, decoder: int) -> dict[int, int]:
    """The U-Net skips of an MLP of ``encoder`` + ``decoder`` blocks: block index → the state added to its input.

    The sources are every other encoder state counted back from the last, h_L, h_{L−2}, …, down to h_2 (or h_1),
    deepest first, as the MAE of *Residual Connections Harm Generative Representation Learning* and its authors' code
    inject them: decoder block j takes source j. The decoder's stream starts from h_L itself, so source 0 is the
    stream and decoder block 0 takes no skip; sources beyond the decoder's blocks are left out. The stem's output
    h_0 is never a source: it is a linear image of the input, through which the decoder could bypass the encoder.
    """
    if not 1 <= decoder <= encoder:
        raise ValueError(f"U-Net skips need 1 <= decoder_depth <= depth; got depth={encoder}, decoder_depth={decoder}")
    sources = range(encoder, 0, -2)
    return {encoder + j: sources[j] for j in range(1, min(decoder, len(sources)))}


class ResidualMLP(nn.Module):
    """A residual MLP for 2-D toy data, or flat images.

    The stem is linear (θ_pre of Algorithm 1), so the residual stream h_0 is the input seen through H linear
    read-outs; each block is ``h_{l+1} = α_l h_l + β_l act(W_l h_l + b_l)``; the head maps h_L to logits (or, for
    a generative task, to pixels). With ``decoder_depth`` > 0 the first ``depth`` blocks are an encoder whose
    shortcuts follow ``shortcut``/``alpha_min``, the next ``decoder_depth`` blocks a decoder at α = 1, and with
    ``unet_skips`` decoder block j's input is ``h + h_s`` (:func:`skip_sources`). The representation a probe reads
    is the encoder's output h_depth (:attr:`representation`; h_L without a decoder).

    Args:
        depth: number of (encoder) residual blocks.
        width: hidden width H.
        in_dim: input dimension (2 for the toy sets).
        num_classes: number of classes (outputs).
        activation: branch activation (gelu, as the ResidualDroppath paper; relu, tanh, identity).
        shortcut: α schedule of the encoder (:mod:`lab.shortcuts`).
        alpha_min: last α of the decayed schedules (the encoder's last block).
        zero_init: zero-initialise every branch's output layer.
        drop_path_rate: per-sample drop probability of every branch (droppath / ResidualDroppath).
        decoder_depth: blocks after the encoder, at α = 1 (0: none).
        unet_skips: long skips from the encoder to the decoder (needs a decoder).
    """

    def __init__(self, depth: int = 32, width: int = 32, in_dim: int = 2, num_classes: int = 2,
                 activation: str = "gelu", shortcut: str = "identity", alpha_min: float = 1.0,
                 zero_init: bool = False, drop_path_rate: float = 0.0, decoder_depth: int = 0,
                 unet_skips: bool = False) -> None:
        super().__init__()
        if depth < 1 or width < 1 or decoder_depth < 0:
            raise ValueError(f"depth and width must be >= 1 and decoder_depth >= 0; got depth={depth}, "
                             f"width={width}, decoder_depth={decoder_depth}")
        if unet_skips and not decoder_depth:
            raise ValueError("unet_skips needs a decoder: set decoder_depth >= 1")
        self.depth, self.width, self.num_classes = depth + decoder_depth, width, num_classes
        self.representation = depth  #: the state a probe reads: the encoder's output
        self.skips = skip_sources(depth, decoder_depth) if unet_skips else {}
        self.shortcut_schedule, self.alpha_min = shortcut, alpha_min
        self.stem = nn.Linear(in_dim, width)
        scales = [*block_scales(shortcut, depth, alpha_min), *[(1.0, 1.0)] * decoder_depth]
        self.blocks = nn.ModuleList(
            ResidualBlock(MLPBranch(width, activation), alpha, beta, drop_path_rate) for alpha, beta in scales
        )
        self.head = nn.Linear(width, num_classes)
        if zero_init:
            for block in self.blocks:
                block.branch.zero_init_()

    def iter_blocks(self) -> Iterator[tuple[str, ResidualBlock]]:
        """``("blocks.{i}", block)`` in forward order."""
        for i, block in enumerate(self.blocks):
            yield f"blocks.{i}", block

    def no_weight_decay(self) -> set[str]:
        """Parameters never decayed beyond timm's rule (which spares biases and 1-D parameters): none."""
        return set()

    def _stream(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        """Yields h_0 (the stem's output), then each block's output h_1, …, h_L, each ``[B, H]``; an image input
        ``[B, C, H, W]`` is read as its flattened pixels."""
        h = self.stem(x.flatten(1))
        sources = set(self.skips.values())  # only the states a skip reads are held (see last_state)
        states = {0: h} if 0 in sources else {}
        yield h
        for i, block in enumerate(self.blocks):
            if i in self.skips:  # a U-Net skip: the mirrored encoder state joins the decoder block's input
                h = h + states[self.skips[i]]
            h = block(h)
            if i + 1 in sources:
                states[i + 1] = h
            yield h

    def forward_representation(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_dim]`` (or an image batch) ``-> [B, H]``: the state a probe reads, h_representation (the
        encoder's output)."""
        for i, h in enumerate(self._stream(x)):
            if i == self.representation:
                return h
        raise AssertionError("unreachable")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_dim] -> [B, H]``: the residual stream after the last block, h_L."""
        return last_state(self._stream(x))

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        """``[B, H] -> [B, C]`` logits."""
        return self.head(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NC", intermediates_only: bool = False
                              ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """The residual stream at the selected depths (:mod:`lab.nn.intermediates`: timm's meaning).

        Args:
            x: ``[B, in_dim]``.
            indices: states to return among h_0, …, h_L (None: all L + 1).
            norm: accepted for timm's signature; the stream has no final norm.
            stop_early: with ``intermediates_only``, stop at the last selected state.
            output_fmt: ``NC`` (each state is ``[B, H]``).
            intermediates_only: return only the states.

        Returns:
            ``(h_L [B, H], states)``, ``forward_head(h_L)`` being the logits; or only ``states``, each ``[B, H]``
            (h_0 = stem output = block 0's input, h_{i+1} = block i's output).
        """
        check_format(output_fmt, ("NC",))
        states, last = collect(self._stream(x), self.depth + 1, indices, stop_early and intermediates_only)
        return states if intermediates_only else (last, states)


@register_model(family="residual_mlp", example={"depth": 3, "width": 8, "num_classes": 3, "in_dim": 2},
                input_shape=(2,))
@signature_of(ResidualMLP)
def residual_mlp(**kwargs) -> ResidualMLP:
    """The ResidualDroppath paper's residual MLP; defaults are the 32-layer, 32-wide model of its Figure 1."""
    return ResidualMLP(**kwargs)
