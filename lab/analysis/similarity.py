"""Layer similarity: Euclidean distance between layers' features, with linear CKA beside it.

Fig. 3 of *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*.
"""

from __future__ import annotations

import torch


def _as_layers(features: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    if isinstance(features, (list, tuple)):
        features = torch.stack([f.reshape(f.shape[0], -1) for f in features])
    if features.ndim != 3:
        raise ValueError(f"features must be [L, N, D] (or a list of [N, ...]); got shape {tuple(features.shape)}")
    return features.double()


def layer_distances(features: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """``[L, L]`` Euclidean (Frobenius) distance ‖X_i − X_j‖ between every pair of layers' features.

    Args:
        features: ``[L, N, D]`` — each layer's features on the same N inputs (for the Playground: the grid).
    """
    x = _as_layers(features).flatten(1)
    return torch.cdist(x[None], x[None])[0].float()


def linear_cka(features: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """``[L, L]`` linear CKA (Kornblith et al. 2019) between every pair of layers, in [0, 1].

    CKA(X, Y) = ‖YᵀX‖²_F / (‖XᵀX‖_F ‖YᵀY‖_F) on column-centred features; invariant to orthogonal transforms and
    isotropic scaling, so it compares representations where the distance compares raw values. A layer whose
    centred features are all zero has CKA 0 with every layer (and 1 with itself).
    """
    x = _as_layers(features)
    x = x - x.mean(dim=1, keepdim=True)
    n_layers, _, dim = x.shape
    stacked = x.permute(1, 0, 2).reshape(x.shape[1], n_layers * dim)  # [N, L·D]
    cross = (stacked.T @ stacked).reshape(n_layers, dim, n_layers, dim)  # X_iᵀ X_j blocks, one matmul
    hsic = cross.pow(2).sum(dim=(1, 3))  # [L, L]: ‖X_iᵀ X_j‖²_F
    norms = hsic.diagonal().sqrt()
    denom = norms[:, None] * norms[None, :]
    cka = torch.where(denom > 0, hsic / denom.clamp_min(1e-300), torch.zeros_like(hsic))
    cka.fill_diagonal_(1.0)
    return cka.float()
