"""What the Playground draws: every node's output over the input grid, each layer's weights, the decision map."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lab.data.evaluation_grid import grid
from lab.hooks import eval_mode, iter_blocks


@dataclass(frozen=True)
class NodeMaps:
    """Arrays behind a TFMeter-style grid (float32 numpy, ready to publish as a snapshot).

    Attributes:
        maps: ``[L+1, H, R, R]`` residual-stream value of node k at depth l over the grid (l = 0 is the stem's
            output); rows run along y, columns along x (:func:`lab.data.evaluation_grid.grid`). May be a strided view;
            ``np.ascontiguousarray`` it before handing it to code that needs contiguous memory.
        weights: ``[L+1, H, H_in]`` zero-padded weight matrices feeding each layer: the stem's ``[H, in_dim]``
            first, then each block's branch input layer ``[H, H]``.
        decision: ``[R, R]`` probability of class 1 (softmax over the logits) over the grid.
        limit: the grid spans [−limit, limit]².
    """

    maps: np.ndarray
    weights: np.ndarray
    decision: np.ndarray
    limit: float

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {"maps": self.maps, "weights": self.weights, "decision": self.decision,
                "limit": np.float32(self.limit)}


def _first_linear(module: nn.Module) -> nn.Linear | None:
    if isinstance(module, nn.Linear):
        return module
    return next((m for m in module.modules() if isinstance(m, nn.Linear)), None)


def layer_weights(model: nn.Module) -> np.ndarray:
    """``[L+1, H, H_in]``: the stem's weight, then each block's first linear layer in its branch (zero-padded).

    Only the public surface is used: the model's ``stem`` if it has one, and each block's ``branch``.
    """
    mats = []
    stem = getattr(model, "stem", None)
    lin = _first_linear(stem) if stem is not None else None
    mats.append(lin.weight.detach().float().cpu().numpy() if lin is not None else None)
    for _, block in iter_blocks(model):
        lin = _first_linear(block.branch)
        mats.append(lin.weight.detach().float().cpu().numpy() if lin is not None else None)
    present = [m for m in mats if m is not None]
    if not present:
        return np.zeros((len(mats), 0, 0), np.float32)
    rows = max(m.shape[0] for m in present)
    cols = max(m.shape[1] for m in present)
    out = np.zeros((len(mats), rows, cols), np.float32)
    for i, m in enumerate(mats):
        if m is not None:
            out[i, :m.shape[0], :m.shape[1]] = m
    return out


RESOLUTION = 50
"""Grid points per axis of a node map in *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*."""


@torch.inference_mode()
def node_maps(model: nn.Module, resolution: int = RESOLUTION, limit: float = 1.0) -> NodeMaps:
    """Evaluate a 2-D model on the ``resolution²`` grid and collect every layer's node outputs (eval mode).

    Args:
        model: a model with ``forward_intermediates`` and ``iter_blocks`` taking ``[N, 2]`` inputs.
        resolution: grid points per axis (:data:`RESOLUTION` in the paper).
        limit: half-width of the square.
    """
    with eval_mode(model):
        device = next(model.parameters()).device
        points = grid(resolution, limit).to(device)
        features, states = model.forward_intermediates(points)
        logits = model.forward_head(features)
        width = max(s.shape[1] for s in states)
        if all(s.shape[1] == width for s in states):
            # one copy into [L+1, R·R, H]; the [L+1, H, R, R] layout is a strided view of it, not a second copy
            flat = torch.stack(states).float().cpu().numpy()
            maps = flat.reshape(len(states), resolution, resolution, width).transpose(0, 3, 1, 2)
        else:  # layers of different widths: zero-pad the narrower ones
            maps = np.zeros((len(states), width, resolution, resolution), np.float32)
            for l, state in enumerate(states):
                maps[l, :state.shape[1]] = state.float().cpu().numpy().T.reshape(-1, resolution, resolution)
        decision = torch.softmax(logits.float(), dim=1)[:, -1].reshape(resolution, resolution)
    return NodeMaps(maps, layer_weights(model), decision.cpu().numpy(), float(limit))
