"""The residual block: one shortcut, one branch, one drop path — each a named part."""

from __future__ import annotations

import torch
from torch import nn

from lab.nn.droppath import DropPath


class ResidualBlock(nn.Module):
    """``x_{l+1} = post_act(α · x_l + β · drop_path(F(x_l)))``.

    Named parts, so probes and analyses address them by name:
        ``branch``: the residual function F (its own module; its output layer can be zero-initialised).
        ``alpha``, ``beta``: shortcut and branch scales from :mod:`lab.shortcuts` (plain floats; part of the config,
        not learned).
        ``drop_path``: per-sample dropping of F's output (droppath / ResidualDroppath).
        ``post_act``: activation after the sum for post-activation ResNets (None for pre-activation blocks).

    Args:
        branch: module mapping ``[B, *D] -> [B, *D]``.
        alpha: shortcut scale α (1 = standard residual, 0 = no shortcut).
        beta: branch scale β.
        drop_path_rate: per-sample drop probability of the branch.
        post_act: optional activation applied after the sum.
    """

    def __init__(self, branch: nn.Module, alpha: float = 1.0, beta: float = 1.0, drop_path_rate: float = 0.0,
                 post_act: nn.Module | None = None) -> None:
        super().__init__()
        self.branch = branch
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.drop_path = DropPath(drop_path_rate)
        self.post_act = post_act  # None for pre-activation blocks (skipping an Identity call per block)

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """α · x, skipping the multiply when α = 1 so the standard ResNet costs nothing extra."""
        return x if self.alpha == 1.0 else self.alpha * x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.branch(x)  # F(x)
        if self.drop_path.active:
            f = self.drop_path(f)  # per-sample drop (droppath / ResidualDroppath)
        h = self.shortcut(x) + (f if self.beta == 1.0 else self.beta * f)
        return h if self.post_act is None else self.post_act(h)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4g}, beta={self.beta:.4g}"
