"""A residual MLP: 2-D input → width-H stem → L residual blocks (Linear + activation) → head.

The model of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections* §3.1.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from lab.nn.block import ResidualBlock
from lab.nn.intermediates import check_format, collect
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


class ResidualMLP(nn.Module):
    """A residual MLP for 2-D toy data.

    The stem is linear (θ_pre of Algorithm 1), so the residual stream h_0 is the input seen through H linear
    read-outs; each block is ``h_{l+1} = α_l h_l + β_l act(W_l h_l + b_l)``; the head maps h_L to logits.

    Args:
        depth: number of residual blocks L.
        width: hidden width H.
        in_dim: input dimension (2 for the toy sets).
        num_classes: number of classes.
        activation: branch activation (gelu, as the ResidualDroppath paper; relu, tanh, identity).
        shortcut: α schedule (:mod:`lab.shortcuts`).
        alpha_min: last α of the decayed schedules.
        zero_init: zero-initialise every branch's output layer.
        drop_path_rate: per-sample drop probability of every branch (droppath / ResidualDroppath).
    """

    def __init__(self, depth: int = 32, width: int = 32, in_dim: int = 2, num_classes: int = 2,
                 activation: str = "gelu", shortcut: str = "identity", alpha_min: float = 1.0,
                 zero_init: bool = False, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"depth and width must be >= 1; got depth={depth}, width={width}")
        self.depth, self.width, self.num_classes = depth, width, num_classes
        self.shortcut_schedule, self.alpha_min = shortcut, alpha_min
        self.stem = nn.Linear(in_dim, width)
        self.blocks = nn.ModuleList(
            ResidualBlock(MLPBranch(width, activation), alpha, beta, drop_path_rate)
            for alpha, beta in block_scales(shortcut, depth, alpha_min)
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
        """Yields h_0 (the stem's output), then each block's output h_1, …, h_L, each ``[B, H]``."""
        h = self.stem(x)
        yield h
        for block in self.blocks:
            h = block(h)
            yield h

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_dim] -> [B, H]``: the residual stream after the last block, h_L."""
        *_, h = self._stream(x)
        return h

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


@register_model
@signature_of(ResidualMLP)
def residual_mlp(**kwargs) -> ResidualMLP:
    """The ResidualDroppath paper's residual MLP; defaults are the 32-layer, 32-wide model of its Figure 1."""
    return ResidualMLP(**kwargs)
