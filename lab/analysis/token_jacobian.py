"""Residual Jacobians of a sequence model per token position: J_i^(t) = ∂F_i(h)_t / ∂h_t.

A Transformer's residual step maps the whole token stream h ``[T, D]`` to ``[T, D]``; its full Jacobian is
``(T·D) × (T·D)`` — 98,304² for GPT-2 small at 128 tokens — and mixes two things: how a token's own state is
transformed, and how attention moves information between tokens. *Residual Alignment: Uncovering the Mechanisms of
Residual Networks* studies the first in ResNets (one input, one state); the lab takes it per token position: the
``D × D`` block of step i's branch Jacobian at token t, the other tokens held at their states. Each (input, position)
pair is then one "input" of the analysis: its states h_0^(t) … h_L^(t) form a trajectory, its L Jacobians are
aligned, measured and fitted exactly as a ResNet's are (:func:`~lab.analysis.alignment_stats.alignment_stats` with
``positions``). For an MLP step the block is the whole Jacobian at that token (an MLP acts on each token alone).

The same conventions as :mod:`lab.analysis.jacobian`: eval mode (flags restored), the skip excluded, steps of the form
``h + F(h)`` (α = β = 1, no post-activation: every Transformer sub-layer the lab reads).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.func import jvp, vjp, vmap

from lab.analysis.svd import LinearOperator
from lab.hooks import eval_mode, iter_blocks

__all__ = ["POSITIONS", "check_positions", "spread_positions", "token_jacobian_operator", "token_jacobians"]

_BASIS_ELEMENTS = 2**24  # tangent entries per vmapped call: basis columns × T × D (64 MB of float32)


POSITIONS = 4
"""Token positions a decoder's analysis takes per window by default (:func:`spread_positions`)."""


def spread_positions(tokens: int, count: int = POSITIONS) -> list[int]:
    """``count`` token positions spread evenly over a window of ``tokens``, the last one included (the token whose
    state predicts the next), e.g. ``[31, 63, 95, 127]`` of 128: a token late in the window attends to many before
    it, an early one to few, and the analysis sees both."""
    count = max(1, min(count, tokens))
    return sorted({tokens * (i + 1) // count - 1 for i in range(count)})


def check_positions(positions: Sequence[int], tokens: int) -> list[int]:
    """``positions`` as non-negative indices into a stream of ``tokens`` tokens (negative ones count from the end).

    Raises:
        ValueError: none given, one out of range, or one twice.
    """
    out = [p + tokens if p < 0 else p for p in positions]
    if not out or any(not 0 <= p < tokens for p in out) or len(set(out)) != len(out):
        raise ValueError(f"token positions must be distinct indices into {tokens} tokens; got {list(positions)}")
    return out


def _step_fn(model: nn.Module, block: nn.Module, h: Tensor, t: int):
    """``v [D] ↦ F(h with token t set to v)_t [D]``: the branch at token t, the other tokens fixed at h ``[T, D]``.

    Only what token t's output depends on is computed: a step marked ``tokenwise`` (an MLP) sees token t alone, and
    a causal model's step the tokens up to t — the same numbers at a fraction of the cost (T times less for an MLP).
    """
    if getattr(block, "tokenwise", False):
        return lambda v: block.branch(v[None, None])[0, 0]
    if getattr(model, "causal", False):
        h = h[:t + 1]

    def fn(v: Tensor) -> Tensor:
        return block.branch(torch.cat([h[:t], v[None], h[t + 1:]])[None])[0, t]
    return fn


def token_jacobians(model: nn.Module, x: Tensor, positions: Sequence[int], *, blocks: Sequence[int] | None = None,
                    out: Tensor | None = None) -> Tensor:
    """Dense per-token residual Jacobians of the selected steps at every input and position.

    Args:
        model: a sequence model behind the lab's surface (``forward_intermediates`` giving ``[B, T, D]`` states,
            ``iter_blocks`` giving steps with a ``branch``), e.g. :class:`~lab.nn.hf.HFTransformer`.
        x: inputs ``[B, ...]`` (token ids ``[B, T]``).
        positions: token positions t (negative: from the end).
        blocks: step indices (default: all).
        out: ``[B·P, L, D, D]`` to write into (a buffer reused over chunks).

    Returns:
        ``[B·P, L, D, D]``, row ``b·P + p`` the Jacobians of input b at position ``positions[p]``, ``J[..., a, c]
        = ∂F_a / ∂h_c`` at that token.
    """
    named = [b for _, b in iter_blocks(model)]
    idx = list(range(len(named))) if blocks is None else [int(i) for i in blocks]
    with eval_mode(model), torch.no_grad():
        states = model.forward_intermediates(x, intermediates_only=True)
        T, D = states[0].shape[1:]
        pos = check_positions(positions, T)
        P = len(pos)
        if out is None:
            out = torch.empty(len(x) * P, len(idx), D, D, dtype=states[0].dtype, device=states[0].device)
        basis = torch.eye(D, dtype=states[0].dtype, device=states[0].device)
        cols = max(1, _BASIS_ELEMENTS // (T * D))
        for col, i in enumerate(idx):
            for b in range(len(x)):
                h = states[i][b]
                for p, t in enumerate(pos):
                    fn = _step_fn(model, named[i], h, t)
                    v = h[t]
                    rows = [vmap(lambda e, fn=fn, v=v: jvp(fn, (v,), (e,))[1])(chunk) for chunk in basis.split(cols)]
                    out[b * P + p, col] = torch.cat(rows).mT  # row e of the stack is J e_e: transpose to J
    return out


def token_jacobian_operator(model: nn.Module, x: Tensor, position: int, i: int) -> LinearOperator:
    """Step i's per-token Jacobian at one input and position as a matrix-free ``D × D`` operator (jvp / vjp), for
    widths too large to form (a Llama's D = 4096).

    Args:
        model: a sequence model (as :func:`token_jacobians`).
        x: one input ``[1, ...]``.
        position: the token t (negative: from the end).
        i: step index.
    """
    block = [b for _, b in iter_blocks(model)][i]
    with eval_mode(model), torch.no_grad():
        h = model.forward_intermediates(x, intermediates_only=True)[i][0]
        (t,) = check_positions([position], h.shape[0])
        fn = _step_fn(model, block, h, t)
        v = h[t]
        _, pullback = vjp(fn, v)
    D = v.numel()
    cols = max(1, _BASIS_ELEMENTS // (h.numel()))

    def matmat(X: Tensor) -> Tensor:  # [D, k] -> [D, k]
        with eval_mode(model), torch.no_grad():
            return torch.cat([vmap(lambda e: jvp(fn, (v,), (e,))[1])(c) for c in X.mT.split(cols)]).mT

    def rmatmat(Y: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([vmap(pullback)(c)[0] for c in Y.mT.split(cols)]).mT

    return LinearOperator((D, D), matmat, rmatmat, dtype=v.dtype, device=v.device)
