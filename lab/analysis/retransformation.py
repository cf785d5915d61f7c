"""Re-transformation across layers: how far each layer's features move from the input and from the layer before.

*ResidualDroppath: Enhancing Feature Reuse over Residual Connections* (§3.1, Figure 3) computes the Euclidean distance
between the input and the features of every layer of a 32-layer MLP on a grid of test inputs, and reads its rise and
fall as the network transforming its features away and back again rather than carrying them forward near the identity:
feature reuse across layers that residual connections do not make easy. This module measures that for any residual
network, one residual step at a time, from its stream h_0 … h_L (``forward_intermediates``) at N inputs:

- ``to_input[i] = ‖h_i − h_s‖_F / ‖h_s‖_F``, the paper's distance, relative to h_s, the first state of the same shape
  (``stage_start[i] = s``: h_0 for an MLP or a ViT, the first state of its stage in a conv net, where a projection
  block changes the shape and no distance to the input is defined);
- ``to_previous[i] = ‖h_i − h_{i−1}‖_F / ‖h_{i−1}‖_F``, how much step i changes the stream (NaN at i = 0 and where a
  projection changes the shape);
- ``cka [L+1, L+1]``, linear CKA between every pair of layers, computed from the N × N Gram matrices so that layers of
  any widths compare (a conv net's stages; equal to :func:`~lab.analysis.similarity.linear_cka` where widths match);
- ``backtrack``: the share of the path of ``to_input`` that heads back toward its stage's input,
  ``Σ max(0, −Δ) / Σ |Δ|`` over consecutive layers of a stage. 0 when every layer moves the features farther from the
  input (no re-transformation); it grows as layers undo what earlier ones did, as in the paper's Figure 3.
  ``cka_backtrack`` is the same share for 1 − CKA to h_0, which is defined across stages.

States are processed one at a time (only h_s, h_{i−1} and the N × N Gram matrices are kept), so a ResNet-50's
stream at 224 px costs the network's forward pass plus a few states, not all of them at once in float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

__all__ = ["backtrack", "retransformation", "standardised_distances"]


def backtrack(curve: np.ndarray, segments: np.ndarray | None = None) -> float:
    """``Σ max(0, −Δ) / Σ |Δ|`` of ``curve``'s steps, over steps inside one segment (``segments[i]`` labels point i;
    default one segment); NaN entries and a curve that never moves give NaN."""
    curve = np.asarray(curve, np.float64)
    seg = np.zeros(len(curve), np.int64) if segments is None else np.asarray(segments)
    delta = np.diff(curve)
    keep = (seg[1:] == seg[:-1]) & np.isfinite(delta)
    total = np.abs(delta[keep]).sum()
    return float(np.clip(-delta[keep], 0, None).sum() / total) if total > 0 else math.nan


def standardised_distances(features: Tensor) -> np.ndarray:
    """``[L+1]`` Euclidean distance of every layer's standardised features to layer 0's, a scale-free form of the
    paper's Figure 3 distance.

    Each layer's features ``[N, H]`` are centred over the N inputs and divided by their Frobenius norm (total
    variance 1), so a layer that only grows or shrinks the stream (un-normalised residual blocks grow it hundreds of
    times over 32 layers) does not move, and what remains is how the features' configuration differs from layer 0's:
    d = ‖X̃_l − X̃_0‖_F = √(2 − 2⟨X̃_l, X̃_0⟩) in [0, 2]; √2 for features uncorrelated with layer 0's. A layer whose
    features are constant over the inputs is NaN.

    Args:
        features: ``[L+1, N, H]``, each layer's features on the same N inputs (the 50 × 50 grid).
    """
    x = features.double().flatten(2)
    x = x - x.mean(dim=1, keepdim=True)
    norm = torch.linalg.vector_norm(x.flatten(1), dim=1)
    x = x / torch.where(norm > 0, norm, torch.nan)[:, None, None]
    return torch.linalg.vector_norm((x - x[:1]).flatten(1), dim=1).numpy()


def _relative_distance(x: Tensor, ref: Tensor) -> float:
    """‖x − ref‖_F / ‖ref‖_F in float64."""
    return float(torch.linalg.vector_norm((x - ref).double()) / torch.linalg.vector_norm(ref.double()))


def _centred_gram(h: Tensor) -> Tensor:
    """``[N, N]`` Gram matrix of the column-centred features ``[N, D]``, in float64."""
    x = h.double()
    x = x - x.mean(dim=0, keepdim=True)
    return x @ x.T


def retransformation(states: Iterable[Tensor]) -> dict[str, np.ndarray]:
    """Distances to the input and to the previous layer, and linear CKA between layers, of a residual stream.

    Args:
        states: h_0 … h_L, each ``[N, ...]`` (flattened per input: ``[N, D_i]``) on the same N inputs; N ≥ 2.

    Returns:
        float64 numpy arrays ``to_input [L+1]``, ``to_previous [L+1]`` (NaN at 0), ``stage_start [L+1]`` (int),
        ``cka [L+1, L+1]``, ``cka_to_input [L+1]`` (row 0 of ``cka``), and 0-d ``backtrack``, ``cka_backtrack``,
        ``inputs``. See the module docstring.

    Raises:
        ValueError: fewer than two inputs or one state, or states on different numbers of inputs.
    """
    to_input, to_previous, stage_start, grams = [], [], [], []
    start = previous = None
    start_index = 0
    for i, h in enumerate(states):
        x = h.detach().flatten(1)
        if i == 0 and len(x) < 2:
            raise ValueError(f"re-transformation needs at least two inputs, got {len(x)}")
        if start is not None and len(x) != len(start):
            raise ValueError(f"state {i} holds {len(x)} inputs, state 0 {len(start)}")
        if start is None or x.shape != start.shape:
            start, start_index = x, i
        stage_start.append(start_index)
        to_input.append(_relative_distance(x, start))
        same = previous is not None and previous.shape == x.shape
        to_previous.append(_relative_distance(x, previous) if same else math.nan)
        grams.append(_centred_gram(x))
        previous = x
    if len(grams) < 2:
        raise ValueError("re-transformation needs at least two states (h_0 and one block's output)")
    K = torch.stack(grams)  # [L+1, N, N]
    hsic = torch.einsum("inm,jnm->ij", K, K)  # <K_i, K_j>_F = ‖X_iᵀ X_j‖²_F
    norms = hsic.diagonal().sqrt()
    denom = norms[:, None] * norms[None, :]
    cka = torch.where(denom > 0, hsic / denom.clamp_min(1e-300), torch.zeros_like(hsic))
    cka.fill_diagonal_(1.0)
    cka = cka.numpy()
    to_input_a, stages = np.asarray(to_input), np.asarray(stage_start, np.int64)
    return {"to_input": to_input_a, "to_previous": np.asarray(to_previous), "stage_start": stages, "cka": cka,
            "cka_to_input": cka[0].copy(), "backtrack": np.asarray(backtrack(to_input_a, stages)),
            "cka_backtrack": np.asarray(backtrack(1.0 - cka[0])), "inputs": np.asarray(float(len(grams[0])))}
