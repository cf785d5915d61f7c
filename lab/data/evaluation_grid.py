"""The evaluation grid: equally spaced points over the input plane.

The grid of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*, over which every node's output
is drawn.
"""

from __future__ import annotations

import torch


def grid_axis(resolution: int = 50, limit: float = 1.0) -> torch.Tensor:
    """``[resolution]`` equally spaced values from −limit to +limit, both included."""
    if resolution < 2:
        raise ValueError(f"resolution must be >= 2; got {resolution}")
    if limit <= 0:
        raise ValueError(f"limit must be > 0; got {limit}")
    return torch.linspace(-limit, limit, resolution)


def grid(resolution: int = 50, limit: float = 1.0) -> torch.Tensor:
    """``[resolution², 2]`` float32 points (x, y) on [−limit, limit]²; 2,500 points by default.

    Row-major with y slowest: ``grid(...).reshape(R, R, 2)[i, j] == (axis[j], axis[i])``, so any per-point value
    reshaped to ``[R, R]`` is an image whose rows run along y (bottom to top) and columns along x.
    """
    axis = grid_axis(resolution, limit)
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    return torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=1)
