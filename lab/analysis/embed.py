"""2-D embeddings of feature sets: PCA (exact, deterministic) and UMAP (cached, lazily imported).

UMAP is slow (numba compilation on first use, seconds per fit), and a browser page redraws the same snapshot many
times, so fits are memoised in a small in-process LRU keyed on the bytes of the input and the parameters.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
import torch
from torch import Tensor

__all__ = ["clear_umap_cache", "pca", "umap_embed"]

_UMAP_CACHE: OrderedDict[tuple, np.ndarray] = OrderedDict()
_UMAP_CACHE_SIZE = 16
_UMAP_LOCK = threading.Lock()  # pages and jobs call from several threads


def pca(features: Tensor | np.ndarray, k: int = 2) -> tuple[Tensor, Tensor] | tuple[np.ndarray, np.ndarray]:
    """Project features on their top-k principal axes.

    Features are centred by their mean over samples and decomposed by a thin SVD X_c = U S Vᵀ; coordinates are
    U S = X_c V. Sign convention (deterministic, as ``sklearn.decomposition.PCA`` ≥ 1.5): each axis (row of Vᵀ) is
    flipped so that its largest-magnitude loading is positive.

    Args:
        features: features [n, d], a torch tensor (computed on its device and dtype) or a numpy array.
        k: number of components, 1 ≤ k ≤ min(n, d).

    Returns:
        coords [n, k] and explained_variance_ratio [k] (fraction of the total variance on each axis), of the same
        kind (torch or numpy) as the input.
    """
    is_numpy = not isinstance(features, Tensor)
    X = torch.as_tensor(np.asarray(features) if is_numpy else features)
    if not X.is_floating_point():
        X = X.to(torch.float64 if is_numpy else torch.get_default_dtype())
    if X.ndim != 2:
        raise ValueError(f"features must be [n, d], got shape {tuple(X.shape)}")
    n, d = X.shape
    if not 1 <= k <= min(n, d):
        raise ValueError(f"k must satisfy 1 <= k <= min(n, d) = {min(n, d)}, got {k}")
    Xc = X - X.mean(dim=0)
    _, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
    Vh = Vh[:k]
    idx = Vh.abs().argmax(dim=1)
    signs = torch.sign(Vh.gather(1, idx[:, None]).squeeze(1))
    Vh = Vh * torch.where(signs == 0, torch.ones_like(signs), signs)[:, None]
    coords = Xc @ Vh.T
    var = S**2
    total = var.sum()
    ratio = var[:k] / total if total > 0 else torch.zeros_like(var[:k])
    if is_numpy:
        return coords.numpy(), ratio.numpy()
    return coords, ratio


def _key(X: np.ndarray, params: tuple) -> tuple:
    digest = hashlib.blake2b(np.ascontiguousarray(X).tobytes(), digest_size=16).hexdigest()
    return (digest, X.shape, X.dtype.str, *params)


def umap_embed(
    features: Tensor | np.ndarray,
    *,
    n_neighbors: int = 15,
    min_dist: float = 0.1,
    seed: int = 0,
    metric: str = "euclidean",
) -> np.ndarray:
    """UMAP embedding in 2-D, memoised.

    ``umap-learn`` is imported here, not at module import, so the library loads without it and without numba's
    start-up cost. Fits use ``random_state=seed`` and ``n_jobs=1`` (UMAP is only reproducible single-threaded).
    ``n_neighbors`` is capped at n − 1 so tiny sets still embed.

    The result is cached (LRU of 16 entries) on a hash of the feature bytes, shape, dtype and parameters; a repeated
    call returns the *same* array object, which is therefore made read-only — copy it before modifying.

    Args:
        features: features [n, d] with n ≥ 3.
        n_neighbors: size of the local neighbourhood (larger = more global structure).
        min_dist: minimum spacing of embedded points.
        seed: random state of the fit.
        metric: any metric name umap-learn accepts.

    Returns:
        Embedding [n, 2], float32, read-only.
    """
    X = features.detach().cpu().numpy() if isinstance(features, Tensor) else np.asarray(features)
    if X.ndim != 2 or X.shape[0] < 3:
        raise ValueError(f"features must be [n, d] with n >= 3, got shape {X.shape}")
    X = np.ascontiguousarray(X, dtype=np.float32)
    n_nb = max(2, min(n_neighbors, X.shape[0] - 1))
    key = _key(X, (n_nb, float(min_dist), int(seed), metric))
    with _UMAP_LOCK:
        if key in _UMAP_CACHE:
            _UMAP_CACHE.move_to_end(key)
            return _UMAP_CACHE[key]

    import umap  # lazy: heavy import (numba)

    reducer = umap.UMAP(n_components=2, n_neighbors=n_nb, min_dist=min_dist, metric=metric, random_state=seed, n_jobs=1)
    emb = np.asarray(reducer.fit_transform(X), dtype=np.float32)
    emb.setflags(write=False)
    with _UMAP_LOCK:
        emb = _UMAP_CACHE.setdefault(key, emb)  # another thread may have finished the same fit first
        _UMAP_CACHE.move_to_end(key)
        while len(_UMAP_CACHE) > _UMAP_CACHE_SIZE:
            _UMAP_CACHE.popitem(last=False)
    return emb


def clear_umap_cache() -> None:
    """Drop every memoised UMAP embedding."""
    with _UMAP_LOCK:
        _UMAP_CACHE.clear()
