"""Parameters of K models stacked along a member axis, and the optimiser steps that update every member at once.

:class:`~lab.train.ensemble.EnsembleTrainer` keeps each parameter kind of its K residual MLPs as one tensor
(:class:`Stack`; all of them a :class:`StackedParameters`); :func:`sgd_update` and :func:`adam_update` apply
``torch.optim``'s SGD, Adam and AdamW arithmetic to those tensors with each member's own hyper-parameters, in
torch.optim's order of operations, so every member lands where its solo run would (up to float rounding). A
hyper-parameter all members share enters as a Python scalar, exactly as torch.optim uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Stack:
    """One parameter kind of all members, e.g. every block's ``branch.fc.weight``.

    ``data`` is ``[K, ...]`` (stem, head) or ``[L, K, ...]`` (blocks; ``axis`` 1); ``leaves`` are what the forward
    uses: ``data`` itself, or its ``L`` block slices. ``state`` holds the optimiser's tensors of the same shape.
    ``decays``: whether weight decay applies to this kind (:func:`lab.train.optim.decayed`).
    """

    axis: int
    data: torch.Tensor
    decays: bool = True
    grad: torch.Tensor = field(init=False)
    leaves: list[torch.Tensor] = field(init=False)
    state: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.attach(torch.zeros_like(self.data))

    def attach(self, grad: torch.Tensor) -> None:
        """Make the leaves (requiring grad) and point their ``.grad`` into the stacked gradient ``grad``."""
        self.grad = grad
        if self.axis == 0:
            self.data.requires_grad_(True)
            self.data.grad = self.grad
            self.leaves = [self.data]
            return
        self.data.requires_grad_(False)
        self.leaves = []
        for leaf, leaf_grad in zip(self.data.unbind(0), self.grad.unbind(0), strict=True):
            leaf.requires_grad_(True)  # a slice of a tensor that needs no grad: a leaf of its own
            leaf.grad = leaf_grad
            self.leaves.append(leaf)

    def keep(self, slots: torch.Tensor) -> None:
        """Keep only the members at ``slots`` (indices along the member axis), gradients and state included."""
        with torch.no_grad():
            self.data = self.data.index_select(self.axis, slots)
            self.state = {k: v.index_select(self.axis, slots) for k, v in self.state.items()}
            grad = self.grad.index_select(self.axis, slots)
        self.attach(grad)

    def member(self, tensor: torch.Tensor, slot: int, block: int | None) -> torch.Tensor:
        """Member ``slot``'s slice of ``tensor`` (``data``, ``grad`` or a state tensor); block ``block`` if stacked."""
        return tensor[slot] if self.axis == 0 else tensor[block, slot]

    def bcast(self, values: list[float]) -> float | torch.Tensor:
        """Per-member scalars shaped to broadcast against ``data``; one float when all members agree (then the
        update uses the very torch.optim call with a Python scalar)."""
        if all(v == values[0] for v in values):
            return values[0]
        shape = [1] * self.data.ndim
        shape[self.axis] = len(values)
        return torch.tensor(values, dtype=self.data.dtype, device=self.data.device).view(shape)


class StackedParameters:
    """Every parameter of K models of one architecture, as :class:`Stack` s keyed by parameter kind.

    A parameter named ``<block_prefix><i>.<rest>`` (block ``i`` of a residual stack) joins the kind
    ``blocks.<rest>`` along a leading block axis (``[L, K, ...]``); any other is its own kind (``[K, ...]``).

    Args:
        models: the K models, in member order (their parameters are copied: the stacks are the ensemble's).
        block_prefix: the name prefix of the stacked blocks' parameters.
    """

    def __init__(self, models: Sequence[nn.Module], block_prefix: str = "blocks.") -> None:
        self.names = [name for name, _ in models[0].named_parameters()]
        self.where: dict[str, tuple[str, int | None]] = {}
        """Per parameter name, ``(kind, block)`` (block None for an unstacked kind)."""
        for name in self.names:
            if name.startswith(block_prefix):
                block, _, rest = name[len(block_prefix):].partition(".")
                self.where[name] = (f"blocks.{rest}", int(block))
            else:
                self.where[name] = (name, None)
        params = [dict(m.named_parameters()) for m in models]
        self.stacks: dict[str, Stack] = {}
        with torch.no_grad():
            for kind in dict.fromkeys(k for k, _ in self.where.values()):
                names = [n for n in self.names if self.where[n][0] == kind]
                if self.where[names[0]][1] is None:
                    self.stacks[kind] = Stack(0, torch.stack([p[names[0]].detach() for p in params]))
                else:
                    self.stacks[kind] = Stack(1, torch.stack([torch.stack([p[n].detach() for p in params])
                                                              for n in names]))

    def mark_decay(self, decays: dict[str, bool]) -> None:
        """Mark each stack decayed or not from ``decays`` (per parameter name); a stack decays as a whole."""
        for kind, stack in self.stacks.items():
            flags = {decays[name] for name, (k, _) in self.where.items() if k == kind}
            if len(flags) != 1:
                raise ValueError(f"weight decay applies to some {kind} parameters and not others; the ensemble "
                                 "decays whole stacks")
            stack.decays = flags.pop()

    def zero_state(self, names: Sequence[str]) -> None:
        """Give every stack the optimiser state tensors ``names``, zero (``exp_avg``, ``momentum_buffer`` …)."""
        for stack in self.stacks.values():
            stack.state = {n: torch.zeros_like(stack.data, requires_grad=False) for n in names}

    def keep(self, slots: torch.Tensor) -> None:
        """Keep only the members at ``slots``, gradients and optimiser state included."""
        for stack in self.stacks.values():
            stack.keep(slots)

    def zero_grad(self) -> None:
        for stack in self.stacks.values():
            stack.grad.zero_()

    @torch.no_grad()
    def update(self, optimizer: str, t: int, lrs: list[float], hyper: list[dict[str, Any]]) -> None:
        """Step ``t`` (1-based) of ``optimizer`` (``sgd``, ``adam`` or ``adamw``) for every member, with its rate in
        ``lrs`` and its ``hyper`` (torch.optim's group: ``weight_decay``, ``momentum`` or ``betas`` and ``eps``);
        weight decay only on the stacks that decay."""
        for stack in self.stacks.values():
            wds = [h["weight_decay"] if stack.decays else 0.0 for h in hyper]
            if optimizer == "sgd":
                sgd_update(stack, t, lrs, wds, [h["momentum"] for h in hyper])
            else:
                adam_update(stack, t, lrs, wds, hyper, decoupled=optimizer == "adamw")

    @torch.no_grad()
    def member_parameters(self, slot: int) -> dict[str, torch.Tensor]:
        """The member at ``slot``, as its own model's state dict (copies)."""
        return {name: self.stacks[kind].member(self.stacks[kind].data, slot, block).clone()
                for name, (kind, block) in self.where.items()}

    @torch.no_grad()
    def member_state(self, slot: int) -> dict[str, dict[str, torch.Tensor]]:
        """Per parameter name, the optimiser state tensors of the member at ``slot`` (copies)."""
        out = {}
        for name in self.names:
            kind, block = self.where[name]
            stack = self.stacks[kind]
            out[name] = {k: stack.member(v, slot, block).clone() for k, v in stack.state.items()}
        return out


def sgd_update(stack: Stack, t: int, lrs: list[float], wds: list[float], momenta: list[float]) -> None:
    """``torch.optim.SGD``'s step ``t`` (1-based) on every member of ``stack`` at once, in place: per-member rates,
    weight decays and momenta (weight decay added to the gradient before the momentum, as torch.optim)."""
    p, g = stack.data, stack.grad
    if any(wds):
        wd = stack.bcast(wds)
        g = g.add(p, alpha=wd) if isinstance(wd, float) else torch.addcmul(g, p, wd)
    if any(momenta):  # a member without momentum gets buf · 0 + g = g, as its solo update
        buf = stack.state["momentum_buffer"]
        if t == 1:
            buf.copy_(g)
        else:
            buf.mul_(stack.bcast(momenta)).add_(g)
        g = buf
    lr = stack.bcast(lrs)
    if isinstance(lr, float):
        p.add_(g, alpha=-lr)
    else:
        p.add_(g * -lr)


def adam_update(stack: Stack, t: int, lrs: list[float], wds: list[float], hyper: list[dict[str, Any]], *,
                decoupled: bool) -> None:
    """``torch.optim.Adam``'s (``decoupled``: ``AdamW``'s) step ``t`` (1-based) on every member of ``stack`` at once,
    with per-member rates, weight decays and ``hyper`` (``betas``, ``eps``), bias-corrected as torch.optim."""
    p, g = stack.data, stack.grad
    b1 = [h["betas"][0] for h in hyper]
    b2 = [h["betas"][1] for h in hyper]
    if any(wds):
        if decoupled:  # shrink the parameter before the moment update
            p.mul_(stack.bcast([1 - lr * wd for lr, wd in zip(lrs, wds, strict=True)]))
        else:
            wd = stack.bcast(wds)
            g = g.add(p, alpha=wd) if isinstance(wd, float) else torch.addcmul(g, p, wd)
    m, v = stack.state["exp_avg"], stack.state["exp_avg_sq"]
    m.lerp_(g, stack.bcast([1 - b for b in b1]))
    v.mul_(stack.bcast(b2))
    one_minus_b2 = stack.bcast([1 - b for b in b2])
    if isinstance(one_minus_b2, float):
        v.addcmul_(g, g, value=one_minus_b2)
    else:
        v.addcmul_(g * one_minus_b2, g)
    step_size = stack.bcast([lr / (1 - b ** t) for lr, b in zip(lrs, b1, strict=True)])
    eps = stack.bcast([h["eps"] for h in hyper])
    denom = (v.sqrt() / stack.bcast([(1 - b ** t) ** 0.5 for b in b2])).add_(eps)
    if isinstance(step_size, float):
        p.addcdiv_(m, denom, value=-step_size)
    else:
        p.add_(-step_size * m / denom)
