"""Probes: the model's blocks by stable name, per-block functions, and a hook context manager that cleans up.

Names follow ``blocks.{i}`` (TransformerLens style), with captured points ``blocks.{i}.input``,
``blocks.{i}.output`` and ``blocks.{i}.branch`` (the branch's output F(h_i), before drop path and scaling).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

POINTS = ("input", "output", "branch")


def iter_blocks(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """``("blocks.{i}", block)`` in forward order, from the model's own ``iter_blocks``."""
    if not hasattr(model, "iter_blocks"):
        raise TypeError(f"{type(model).__name__} has no iter_blocks(); wrap it in a lab adapter first")
    return model.iter_blocks()


def block_function(model: nn.Module, i: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Block i as a function h_i → h_{i+1} (skip and branch included)."""
    return _block(model, i)


def branch_function(model: nn.Module, i: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Block i's residual branch alone, h_i → F_i(h_i).

    The function whose Jacobian *Residual Alignment: Uncovering the Mechanisms of Residual Networks* studies.
    """
    return _block(model, i).branch


def _block(model: nn.Module, i: int) -> nn.Module:
    blocks = [b for _, b in iter_blocks(model)]
    if not -len(blocks) <= i < len(blocks):
        raise IndexError(f"block index {i} out of range for a model with {len(blocks)} blocks")
    return blocks[i]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Evaluation mode inside the ``with``; every module's own training flag is restored afterwards.

    Covers the model's modules and those of the blocks its ``iter_blocks`` yields: an adapter (a timm model seen
    block by block) may hand out block views that live outside ``model.modules()``, and an analysis must see
    them in eval mode too (BatchNorm running statistics, no drop path). Mixed flags survive.

    Attention modules with a ``fused_attn`` switch (timm's, and so the lab's ViT blocks) take their plain softmax
    path inside the ``with``: forward-mode AD (``torch.func.jvp``, which the Jacobian operators use) has no rule for
    the fused ``scaled_dot_product_attention`` kernels. The plain path computes the same attention, with a
    ``[B, heads, T, T]`` matrix in memory.

    Flags are set directly rather than through ``train()``/``eval()``, which walk the module tree through
    ``nn.Module.__setattr__`` and cost about 5 ms per call on the 32-block MLP, a fifth of a live snapshot.
    """
    modules = list(model.modules())
    if hasattr(model, "iter_blocks"):
        seen = {id(m) for m in modules}
        for _, block in model.iter_blocks():
            modules += [m for m in block.modules() if id(m) not in seen and not seen.add(id(m))]
    flags = [m.training for m in modules]
    fused = [m for m in modules if m.__dict__.get("fused_attn") is True]
    try:
        for m in modules:
            m.__dict__["training"] = False
        for m in fused:
            m.__dict__["fused_attn"] = False
        yield
    finally:
        for m, flag in zip(modules, flags, strict=True):
            m.__dict__["training"] = flag
        for m in fused:
            m.__dict__["fused_attn"] = True


class Captured:
    """Tensors recorded by :func:`capture`, by name; several forward calls concatenate along the batch."""

    def __init__(self) -> None:
        self._store: dict[str, list[torch.Tensor]] = {}

    def _add(self, name: str, tensor: torch.Tensor) -> None:
        self._store.setdefault(name, []).append(tensor)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._store:
            raise KeyError(f"nothing captured at {name!r}; captured: {', '.join(self._store) or 'nothing'}")
        parts = self._store[name]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def __contains__(self, name: str) -> bool:
        return name in self._store

    def keys(self) -> list[str]:
        return list(self._store)

    def stack(self, point: str) -> torch.Tensor:
        """``[L, B, ...]``: one point (input, output or branch) of every captured block."""
        names = [n for n in self._store if n.endswith(f".{point}")]
        names.sort(key=lambda n: int(n.split(".")[1]))
        return torch.stack([self[n] for n in names])


@contextlib.contextmanager
def capture(model: nn.Module, points: Iterable[str] = ("input", "output"), blocks: Iterable[int] | None = None,
            *, detach: bool = True) -> Iterator[Captured]:
    """Record block inputs, outputs and branch outputs during forward passes inside the ``with``.

    Captured tensors are cloned (and detached unless ``detach=False``), so later in-place work cannot change
    them. Every hook is removed on exit, also when the body raises.

    Args:
        model: a lab model (or adapter) with ``iter_blocks``.
        points: any of ``"input"``, ``"output"``, ``"branch"``.
        blocks: block indices to record (default: all).
    """
    points = tuple(points)
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        raise ValueError(f"unknown capture point {unknown[0]!r}; valid: {', '.join(POINTS)}")
    wanted = None if blocks is None else set(blocks)
    record = Captured()
    handles = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        return (t.detach() if detach else t).clone()

    def block_hook(name: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if "input" in points:
                record._add(f"{name}.input", keep(args[0]))
            if "output" in points:
                record._add(f"{name}.output", keep(output))
        return hook

    def branch_hook(name: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            record._add(f"{name}.branch", keep(output))
        return hook

    try:
        for i, (name, block) in enumerate(iter_blocks(model)):
            if wanted is not None and i not in wanted:
                continue
            if "input" in points or "output" in points:
                handles.append(block.register_forward_hook(block_hook(name)))
            if "branch" in points:
                handles.append(block.branch.register_forward_hook(branch_hook(name)))
        yield record
    finally:
        for handle in handles:
            handle.remove()
