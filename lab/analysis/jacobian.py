"""Residual Jacobians: the linearisation of each residual branch at an input's residual stream.

The Residual Jacobians of *Residual Alignment: Uncovering the Mechanisms of Residual Networks* (§1.3). For block i
with input h_i, shortcut scale α (or projection P), branch scale β and post-activation σ,

    J_i = diag(σ'(α h_i + β F_i(h_i))) · β · ∂F_i/∂h_i      [D_out, D_in]

the derivative of the block with respect to its input *excluding the skip connection* (the lab's convention). The
operators take it as the Jacobian of ``h ↦ σ(α h_i + β F_i(h))`` at h = h_i with the skip term held fixed, the
dense path as that product itself; both are exact for any element-wise σ (σ = identity for pre-activation blocks,
so J_i = β ∂F_i/∂h_i; β = 1 except for the Table-3b controls of :mod:`lab.shortcuts`). D is the flattened feature
size: the width for FC blocks, C·H·W for conv blocks.

Evaluation happens in ``eval()`` mode (BatchNorm uses its running statistics, drop path is off), at the residual
stream state h_i of the given input from the model's ``forward_intermediates``; the training flag of every module
is restored afterwards. Only the public model surface is used: ``forward_intermediates``, ``iter_blocks`` and each
block's ``branch``, ``beta``, ``post_act`` (None for pre-activation blocks) and ``shortcut`` (α·x, or a timm
projection).

Small D: dense matrices, ∂F_i/∂h_i by forward-mode ``jvp`` over the identity basis (vmapped over the basis and
the batch), then scaled row-wise by β σ'. Forward mode, because the branch's first layer applied to the basis does
not depend on the input: with the basis unbatched it runs once for the whole batch (reverse mode starts at the
input-dependent output end; it measured several times slower on FC blocks with BatchNorm).
Large D (conv blocks: 64 × 16 × 16 = 16,384): a matrix-free :class:`~lab.analysis.svd.LinearOperator` whose
products are batched ``jvp`` / ``vjp`` calls, for :func:`~lab.analysis.svd.randomized_svd` or
:func:`~lab.analysis.svd.block_krylov_svd`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.func import jvp, vjp, vmap

from lab.analysis.alignment import SVDTriplet, jacobian_svds
from lab.analysis.svd import LinearOperator
from lab.hooks import eval_mode, iter_blocks

__all__ = ["block_jacobians", "block_svds", "jacobian_layouts", "jacobian_operator", "jacobian_shapes",
           "residual_jacobians"]

_CHUNK_ELEMENTS = 2**24  # auto chunk: about 64 MB of float32 Jacobian entries per vmapped batch
_OPERATOR_ELEMENTS = 2**26  # an operator's vmapped call: its tangents hold at most ~256 MB of float32 (a ResNet-50's
# first stage at 224 px, D = 256 × 56 × 56, takes 83 columns at a time; its activations cost a few times that)

# torch's forward-mode AD loads its decompositions with torch.jit.script on the first jvp, which warns that
# torch.jit.script is deprecated: torch's own business, printed into every notebook cell and page log that first
# analyses a model. That one warning, from that one place, is silenced.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning,
                        module=r"torch\.jit\._script")


def _as_batch(x: Tensor) -> tuple[Tensor, bool]:
    """(x with a batch dim, whether the caller asked for one input). A vector [in] or image [C, H, W] is one input."""
    if x.ndim in (1, 3):
        return x[None], True
    return x, len(x) == 1


def _select(n_blocks: int, blocks: Sequence[int] | None) -> list[int]:
    idx = list(range(n_blocks)) if blocks is None else [int(i) for i in blocks]
    for i in idx:
        if not 0 <= i < n_blocks:
            raise IndexError(f"block index {i} out of range for a model with {n_blocks} blocks")
    return idx


def _skip(block: nn.Module, h: Tensor) -> Tensor:
    """The skip term of the block's sum: α·h (lab blocks), h or its projection (timm blocks)."""
    return block.shortcut(h) if hasattr(block, "shortcut") else float(getattr(block, "alpha", 1.0)) * h


def _residual_fn(block: nn.Module) -> Callable[[Tensor, Tensor], Tensor]:
    """``(h [*S_in], skip [*S_out]) -> σ(skip + β F(h)) [*S_out]`` for one input; its h-Jacobian at h = h_i is J_i."""
    beta = float(getattr(block, "beta", 1.0))
    post_act = getattr(block, "post_act", None) or (lambda z: z)  # None: a pre-activation block

    def fn(h: Tensor, skip: Tensor) -> Tensor:
        return post_act(skip[None] + beta * block.branch(h[None]))[0]

    return fn


def _states(model: nn.Module, x: Tensor) -> list[Tensor]:
    """Residual stream [h_0, …, h_L] of a batch, without autograd history."""
    with torch.no_grad():
        return model.forward_intermediates(x, intermediates_only=True)


def jacobian_layouts(model: nn.Module, x: Tensor) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``(output shape, input shape)`` of every block's residual Jacobian for inputs shaped like x, per input
    (``(C, H, W)``, ``(tokens, D)`` or ``(D,)``; one forward pass, eval mode).

    Two blocks' Jacobians act on the same space only when their layouts match: a conv net's stages can have equal
    sizes D in different layouts (128 × 2 × 2 and 512 × 1 × 1), which :func:`jacobian_shapes` cannot tell apart.
    """
    xb, _ = _as_batch(x)
    named = [b for _, b in iter_blocks(model)]
    with eval_mode(model):
        states = _states(model, xb[:1])
        with torch.no_grad():
            return [(tuple(_skip(block, states[i]).shape[1:]), tuple(states[i].shape[1:]))
                    for i, block in enumerate(named)]


def jacobian_shapes(model: nn.Module, x: Tensor) -> list[tuple[int, int]]:
    """``(D_out, D_in)`` of every block's residual Jacobian for inputs shaped like x (one forward pass, eval mode).

    Args:
        model: a lab model or adapter.
        x: inputs ``[B, ...]`` or one input without batch dim; only the first is used.

    Returns:
        One ``(D_out, D_in)`` per block, in forward order (equal for the square blocks of the lab's ResNets; conv
        stages differ in D, projection blocks are rectangular).
    """
    return [(math.prod(out), math.prod(inp)) for out, inp in jacobian_layouts(model, x)]


def residual_jacobians(model: nn.Module, x: Tensor, *, blocks: Sequence[int] | None = None,
                       chunk: int | None = None, out: Tensor | None = None) -> Tensor:
    """Dense residual Jacobians J_i of every (or the selected) block at the residual stream of x.

    Args:
        model: a lab model or adapter with ``forward_intermediates`` and ``iter_blocks``.
        x: inputs ``[B, ...]``; one input may also be given without batch dim (a vector ``[in]`` or an image
            ``[C, H, W]``).
        blocks: block indices (default: all). Their Jacobians must share one shape (e.g. all blocks of an
            :class:`~lab.nn.resnets.FCResNet`, or one stage of a conv net); use :func:`block_jacobians` otherwise.
        chunk: inputs per vmapped batch; bounds memory to about chunk × D² entries per block (default: as many as
            fit in ~2²⁴ entries).
        out: a tensor ``[B, L, D_out, D_in]`` of the model's dtype and device to write into, e.g. one buffer
            reused over the chunks of a large batch (fresh memory costs page faults: measured ~0.5 ms per MB, 10×
            a write to memory already mapped).

    Returns:
        ``[L, D, D]`` for one input (unbatched or B = 1), ``[B, L, D, D]`` for a batch; L = number of selected
        blocks, ``J[..., a, b] = ∂out_a / ∂h_b`` in the flattened (C, H, W) order. Rectangular ``[D_out, D_in]``
        for projection blocks.
    """
    xb, single = _as_batch(x)
    named = [b for _, b in iter_blocks(model)]
    idx = _select(len(named), blocks)
    with eval_mode(model):
        first = _states(model, xb[:1])
        shapes = {i: (_skip(named[i], first[i]).numel(), first[i].numel()) for i in idx}
        d_out, d_in = shapes[idx[0]]
        if len(set(shapes.values())) > 1:
            raise ValueError(f"blocks' Jacobians differ in shape ({shapes}): pass blocks= of one shape, or use "
                             "block_jacobians()")
        step = chunk or max(1, _CHUNK_ELEMENTS // (d_out * d_in))
        if out is None:
            out = torch.empty(len(xb), len(idx), d_out, d_in, dtype=first[0].dtype, device=first[0].device)
        elif out.shape != (len(xb), len(idx), d_out, d_in) or out.dtype != first[0].dtype:
            raise ValueError(f"out must be [{len(xb)}, {len(idx)}, {d_out}, {d_in}] of {first[0].dtype}, got "
                             f"{tuple(out.shape)} of {out.dtype}")
        for start in range(0, len(xb), step):
            states = _states(model, xb[start:start + step])
            for col, i in enumerate(idx):
                _dense_jacobians(named[i], states[i], out[start:start + step, col])
    return out[0] if single else out


def _dense_jacobians(block: nn.Module, h: Tensor, out: Tensor) -> None:
    """Writes J_i at every input of a batch, h ``[B, *S_in]``, into ``out`` ``[B, D_out, D_in]``.

    J_i = diag(σ'(z)) · β · ∂F/∂h with z = skip + β F(h): the branch's Jacobian by forward mode over the identity
    basis ``[D_in, *S_in]``, vmapped over the basis inside and the batch outside, then one row scaling by β σ'(z)
    (σ' from a jvp of the element-wise post-activation with a tangent of ones). The basis is a constant of the
    inner function rather than an argument of the outer one, so it is not batched: the branch's first layer (and
    any input-independent op after it, e.g. BatchNorm in eval mode) runs once on it for the whole batch, and
    only the layers after the first input-dependent op (the activation's mask) cost a D_in-column product per
    input. Differentiating the sum and σ outside the jvp saves the half-dozen passes over the ``[B, D_in, D_out]``
    tangent that forward-mode addition and thresholding take. Together about 1.6× faster than ``jacfwd`` of the
    whole block under ``vmap`` (which builds its basis from the batched input, so recomputes the first layer per
    input), measured on 64 inputs × 16 FC blocks of width 512.
    """
    beta = float(getattr(block, "beta", 1.0))
    post_act = getattr(block, "post_act", None)
    d_in = h[0].numel()
    basis = torch.eye(d_in, dtype=h.dtype, device=h.device).reshape(d_in, *h.shape[1:])

    def one(hb: Tensor) -> Tensor:  # [D_in, *S_out]: row e = ∂F/∂h e_e
        return vmap(lambda t: jvp(lambda v: block.branch(v[None])[0], (hb,), (t,))[1])(basis)

    with torch.no_grad():
        dF = vmap(one)(h).reshape(len(h), d_in, -1)  # [B, D_in, D_out]
        if post_act is None:  # pre-activation block: J = β ∂F/∂h
            scale = torch.full((1, 1, 1), beta, dtype=h.dtype, device=h.device)
        else:
            z = _skip(block, h) + beta * block.branch(h)
            scale = beta * jvp(post_act, (z,), (torch.ones_like(z),))[1].reshape(len(h), 1, -1)
        torch.mul(dF, scale, out=out.mT)


def jacobian_operator(model: nn.Module, x: Tensor, i: int) -> LinearOperator:
    """Block i's residual Jacobian J_i at input x as a matrix-free operator (never materialised).

    ``matmat(X [D_in, k])`` = J_i X by k vmapped ``jvp`` calls; ``rmatmat(Y [D_out, k])`` = J_iᵀ Y by k vmapped
    calls of one ``vjp`` (the forward pass is recorded once, when the operator is built); the k columns go through
    vmap in chunks of at most 2²⁶ / D, so memory stays bounded for any k and D. Each product runs with
    the model in eval mode and restores the training flags, so the operator stays valid while the model trains.

    Args:
        model: a lab model or adapter.
        x: one input, ``[1, ...]`` or without batch dim.
        i: block index.

    Returns:
        An operator of shape (D_out, D_in) in the model's dtype and device.
    """
    xb, single = _as_batch(x)
    if not single:
        raise ValueError(f"jacobian_operator takes one input; got a batch of {len(xb)}")
    named = [b for _, b in iter_blocks(model)]
    (i,) = _select(len(named), [i])
    block = named[i]
    with eval_mode(model):
        h = _states(model, xb)[i][0]
        with torch.no_grad():
            skip = _skip(block, h[None])[0]
        fn = _residual_fn(block)
        with torch.no_grad():
            _, pullback = vjp(lambda v: fn(v, skip), h)
    in_shape, out_shape = h.shape, skip.shape

    cols = max(1, _OPERATOR_ELEMENTS // max(h.numel(), skip.numel()))  # columns per vmapped call

    def matmat(X: Tensor) -> Tensor:  # [D_in, k] -> [D_out, k]
        out = []
        for tangents in X.mT.reshape(-1, *in_shape).split(cols):
            with eval_mode(model), torch.no_grad():
                Y = vmap(lambda t: jvp(lambda v: fn(v, skip), (h,), (t,))[1])(tangents)
            out.append(Y.reshape(len(Y), -1))
        return torch.cat(out).mT

    def rmatmat(Y: Tensor) -> Tensor:  # [D_out, k] -> [D_in, k]
        out = []
        for cotangents in Y.mT.reshape(-1, *out_shape).split(cols):
            with torch.no_grad():
                (X,) = vmap(pullback)(cotangents)
            out.append(X.reshape(len(X), -1))
        return torch.cat(out).mT

    return LinearOperator((skip.numel(), h.numel()), matmat, rmatmat, dtype=h.dtype, device=h.device)


def block_jacobians(model: nn.Module, x: Tensor, *, blocks: Sequence[int] | None = None,
                    dense_max_dim: int = 2048) -> list[Tensor | LinearOperator]:
    """Each selected block's J_i at one input: dense ``[D_out, D_in]`` when max(D_out, D_in) ≤ ``dense_max_dim``,
    else a :func:`jacobian_operator`. Blocks may differ in shape (timm stages, projection blocks).

    The list is what :func:`lab.analysis.alignment.alignment_grid` and ``jacobian_svds`` take.
    """
    xb, single = _as_batch(x)
    if not single:
        raise ValueError(f"block_jacobians takes one input; got a batch of {len(xb)}")
    named = [b for _, b in iter_blocks(model)]
    idx = _select(len(named), blocks)
    with eval_mode(model):
        states = _states(model, xb)
        dims = [max(states[i][0].numel(), _skip(named[i], states[i][:1]).numel()) for i in idx]
    return [residual_jacobians(model, xb, blocks=[i])[0] if d <= dense_max_dim else jacobian_operator(model, xb, i)
            for i, d in zip(idx, dims, strict=True)]


def block_svds(model: nn.Module, x: Tensor, k: int, *, blocks: Sequence[int] | None = None,
               dense_max_dim: int = 2048, iters: int = 20, oversample: int = 10, seed: int = 0) -> list[SVDTriplet]:
    """Top-k SVD of each block's residual Jacobian at one input: exact (dense SVD) for small blocks, randomized
    subspace iteration on the jvp/vjp operator for large ones (the Residual Alignment paper, §2.4: T = 20,
    K = 10–30).

    Args:
        model: a lab model or adapter.
        x: one input, ``[1, ...]`` or without batch dim.
        k: singular triplets per block.
        blocks: block indices (default: all).
        dense_max_dim: largest D formed densely (a D × D float32 matrix is 4·D² bytes; its SVD costs O(D³)).
        iters: subspace iterations T of the randomized SVD.
        oversample: extra sketch columns of the randomized SVD.
        seed: seed of its Gaussian start.

    Returns:
        One ``(U [D_out, k], S [k], V [D_in, k])`` per block, S descending — the ``svds=`` that
        :func:`~lab.analysis.alignment.alignment_grid` accepts together with :func:`block_jacobians`' list.
    """
    jacobians = block_jacobians(model, x, blocks=blocks, dense_max_dim=dense_max_dim)
    return jacobian_svds(jacobians, k, iters=iters, oversample=oversample, seed=seed)
