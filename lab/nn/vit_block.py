"""The ViT block with decayed identity shortcuts on both residual sub-layers.

*Residual Connections Harm Generative Representation Learning* (§4) replaces the shortcuts of the MAE encoder's
attention and MLP sub-layers with decayed ones, ``x ← α x + f(x)``. Written out for one pre-norm block:

    h₁  = α_attn · h  + β · attn(norm1(h))
    out = α_mlp · h₁ + β · mlp(norm2(h₁))

α and β come from :mod:`lab.shortcuts` (:func:`sublayer_scales`). The attention is timm's (its ``fused_attn``
switch selects ``F.scaled_dot_product_attention`` or the plain softmax path; :func:`lab.hooks.eval_mode` selects the
plain one, which forward-mode AD can pass through).

For the lab's Residual Alignment analyses the block is also a residual block ``out = α·h + β·F(h)`` with one
shortcut scale ``α = α_attn · α_mlp`` and the *branch* (expanding the two lines above)

    F(h) = α_mlp · attn(norm1(h)) + mlp(norm2(h₁)),

exposed as ``block.branch`` beside ``alpha``, ``beta``, ``shortcut`` and ``post_act = None``, so the residual
Jacobian ``β ∂F/∂h = ∂out/∂h − α I`` of :mod:`lab.analysis.jacobian` is the block's Jacobian without its skip.
"""

from __future__ import annotations

import torch
from torch import nn

from lab.shortcuts import alphas, branch_scales

__all__ = ["DECAY_ON", "DecayedBlock", "DecayedBranch", "sublayer_scales"]

DECAY_ON = ("both", "attn", "mlp")


def sublayer_scales(shortcut: str, depth: int, alpha_min: float = 1.0,
                    decay_on: str = "both") -> list[tuple[float, float, float]]:
    """``(α_attn, α_mlp, β)`` of every block of a ViT of ``depth`` blocks.

    ``sublayer`` (the authors' released MAE code) gives each of the 2L residual sub-layers its own α, linear from 1
    to α_min: block i gets values 2i and 2i + 1. Every other schedule of :mod:`lab.shortcuts` gives block i one α
    for both of its sub-layers and the branch scale β of the Table-3b controls.

    Args:
        shortcut: a schedule of :data:`lab.shortcuts.SCHEDULES`.
        depth: number of blocks L.
        alpha_min: the smallest α of the decayed schedules.
        decay_on: which sub-layers get the scheduled α — ``both`` (the paper's method), ``attn`` or ``mlp`` (the
            attention-only and MLP-only rows of Table 3b; the other sub-layer keeps α = 1). β applies to both.
    """
    if decay_on not in DECAY_ON:
        raise ValueError(f"unknown decay_on {decay_on!r}; valid: {', '.join(DECAY_ON)}")
    if shortcut == "sublayer":
        a = alphas("sublayer", depth, alpha_min)  # 2L values
        pairs = [(a[2 * i], a[2 * i + 1]) for i in range(depth)]
    else:
        pairs = [(a, a) for a in alphas(shortcut, depth, alpha_min)]
    if decay_on == "attn":
        pairs = [(a, 1.0) for a, _ in pairs]
    elif decay_on == "mlp":
        pairs = [(1.0, m) for _, m in pairs]
    return [(a, m, b) for (a, m), b in zip(pairs, branch_scales(shortcut, depth), strict=True)]


class DecayedBranch(nn.Module):
    """The branch F of a :class:`DecayedBlock`: ``block(h) = α·h + β·F(h)`` with α = α_attn · α_mlp.

    ``F(h) = α_mlp · a + mlp(norm2(α_attn · h + β · a))`` with ``a = attn(norm1(h))``: the block's two lines
    expanded, not ``(block(h) − α h) / β``, so there is no cancellation. A view for analyses (the Jacobian
    operators call it); it owns no parameters, and the block's ``forward`` does not call it, so
    :func:`lab.hooks.capture` records no ``branch`` point for these blocks (F = (output − α·input) / β).
    """

    def __init__(self, block: DecayedBlock) -> None:
        super().__init__()
        self._block = [block]  # a list, not a registered submodule: the block owns the parts (no cycle in the tree)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b = self._block[0]
        a = b.attn(b.norm1(h))  # attention sub-layer's branch, [B, T, D]
        h1 = b.alpha_attn * h + b.beta * a  # the stream between the two sub-layers
        return b.alpha_mlp * a + b.mlp(b.norm2(h1))


class DecayedBlock(nn.Module):
    """Pre-norm transformer block ``[B, T, D] -> [B, T, D]`` with decayed shortcuts (see the module docstring).

    Named parts: ``norm1``, ``attn`` (timm's Attention: ``qkv``, ``proj``), ``norm2``, ``mlp`` (timm's Mlp:
    ``fc1``, ``fc2``) — the names of timm's and MAE's ViT blocks, so their ``state_dict`` keys match — and the
    analysis view ``branch``. ``alpha_attn``, ``alpha_mlp``, ``beta`` are plain floats (config, not learned).

    Args:
        dim: token width D.
        num_heads: attention heads (D must divide by it).
        mlp_ratio: MLP hidden width over D.
        alpha_attn: shortcut scale of the attention sub-layer.
        alpha_mlp: shortcut scale of the MLP sub-layer.
        beta: scale of both branches (√0.5 for the Table-3b controls, else 1).
        qkv_bias: bias on the q, k, v projection (True in MAE).
        zero_init: zero the branch output layers (``attn.proj``, ``mlp.fc2``), so the block starts as
            ``α_attn · α_mlp · h`` (*Residual Connections Harm Generative Representation Learning* §3.2).
        norm_eps: LayerNorm epsilon (1e-6 in MAE).
    """

    post_act = None  # a pre-norm block: nothing after the sum

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, alpha_attn: float = 1.0,
                 alpha_mlp: float = 1.0, beta: float = 1.0, qkv_bias: bool = True, zero_init: bool = True,
                 norm_eps: float = 1e-6) -> None:
        super().__init__()
        from timm.layers import Mlp  # imported here: timm takes seconds to import, and only ViTs need it
        from timm.models.vision_transformer import Attention

        if dim % num_heads:
            raise ValueError(f"dim {dim} must be divisible by num_heads {num_heads}")
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, hidden_features=int(dim * mlp_ratio), act_layer=nn.GELU)
        self.alpha_attn, self.alpha_mlp, self.beta = float(alpha_attn), float(alpha_mlp), float(beta)
        self.branch = DecayedBranch(self)
        if zero_init:
            self.zero_init_()

    @property
    def alpha(self) -> float:
        """The block's one shortcut scale α = α_attn · α_mlp (``block(h) = α·h + β·branch(h)``)."""
        return self.alpha_attn * self.alpha_mlp

    def shortcut(self, h: torch.Tensor) -> torch.Tensor:
        """The skip term of ``block(h) = α·h + β·F(h)``."""
        return self.alpha * h

    def zero_init_(self) -> None:
        """Zero both branch output layers (weight and bias): the block becomes ``α_attn · α_mlp · h``."""
        for layer in (self.attn.proj, self.mlp.fc2):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h1 = self.alpha_attn * h + self.beta * self.attn(self.norm1(h))  # [B, T, D]
        return self.alpha_mlp * h1 + self.beta * self.mlp(self.norm2(h1))

    def extra_repr(self) -> str:
        return f"alpha_attn={self.alpha_attn:.4g}, alpha_mlp={self.alpha_mlp:.4g}, beta={self.beta:.4g}"
