"""Per-sample dropping of residual branches: droppath (stochastic depth) and ResidualDroppath.

ResidualDroppath is Algorithm 1 of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*.

Modes, set on every :class:`DropPath` of a model by the trainer before each iteration:

=============== ==================================================================================================
``"droppath"``  Stochastic depth as timm does it: keep each sample's branch with probability 1 − p and divide
                the kept ones by 1 − p, so the expected branch output is unchanged.
``"rdp_drop"``  ResidualDroppath's even iteration (Algorithm 1, line 14): sample a per-sample keep mask,
                remember it, and output ``F(x) · mask`` without rescaling.
``"rdp_train"`` ResidualDroppath's odd iteration (line 16): reuse the remembered mask; the kept branches are
                detached and the dropped ones trained: ``F(x).detach() · mask + F(x) · (1 − mask)``. The forward
                value equals ``F(x)``: the whole network runs, but only the branches dropped in the previous
                iteration receive gradient through their own parameters.
``"off"``       Identity.
=============== ==================================================================================================

Evaluation (``model.eval()``) is always the identity: inference follows the plain network (Figure 5a).
"""

from __future__ import annotations

import torch
from torch import nn

MODES = ("off", "droppath", "rdp_drop", "rdp_train")


class DropPath(nn.Module):
    """Drop a residual branch's output per sample.

    Args:
        rate: probability p of dropping one sample's branch output.
    """

    def __init__(self, rate: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"drop-path rate must be in [0, 1); got {rate}")
        self.rate = float(rate)
        self.mode = "droppath"
        self.generator: torch.Generator | None = None  # set by the trainer so masks follow train.seed
        self.mask: torch.Tensor | None = None  # [B, 1, ...] keep mask of the last rdp_drop iteration

    @property
    def active(self) -> bool:
        """Whether :meth:`forward` can change its input (callers skip the module call otherwise)."""
        return self.training and (self.mode.startswith("rdp") or (self.mode == "droppath" and self.rate > 0.0))

    def _sample_keep(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        keep = torch.full(shape, 1.0 - self.rate, device=x.device, dtype=x.dtype)
        return torch.bernoulli(keep, generator=self.generator)

    def forward(self, branch: torch.Tensor) -> torch.Tensor:
        """``branch``: a block's branch output F(x), ``[B, ...]``; returns it masked according to ``mode``."""
        if not self.training or self.mode == "off":
            return branch
        if self.mode == "droppath":
            if self.rate == 0.0:
                return branch
            return branch * self._sample_keep(branch) / (1.0 - self.rate)
        if self.mode == "rdp_drop":
            self.mask = self._sample_keep(branch)
            return branch * self.mask
        if self.mode == "rdp_train":
            mask = self.mask
            if mask is None or mask.shape[0] != branch.shape[0]:
                raise RuntimeError("ResidualDroppath's training iteration needs the mask of a preceding drop "
                                   "iteration with the same batch size")
            return branch.detach() * mask + branch * (1.0 - mask)
        raise ValueError(f"unknown DropPath mode {self.mode!r}; valid: {', '.join(MODES)}")

    def extra_repr(self) -> str:
        return f"rate={self.rate}, mode={self.mode}"


def set_droppath_mode(model: nn.Module, mode: str, generator: torch.Generator | None = None) -> None:
    """Put every :class:`DropPath` in ``model`` into ``mode`` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown DropPath mode {mode!r}; valid: {', '.join(MODES)}")
    for module in model.modules():
        if isinstance(module, DropPath):
            module.mode = mode
            if generator is not None:
                module.generator = generator
