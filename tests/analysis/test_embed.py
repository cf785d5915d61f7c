"""PCA against scikit-learn / numpy; UMAP shape, determinism and caching."""

import sys
import types

import numpy as np
import pytest
import torch

from lab.analysis.embed import clear_umap_cache, pca, umap_embed


def blobs(n_per: int = 30, d: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=6.0, size=(3, d))
    return np.concatenate([c + rng.normal(size=(n_per, d)) for c in centres])


def anisotropic(n: int = 200, d: int = 6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * np.array([5.0, 3.0, 1.0, 0.5, 0.2, 0.1])[:d] + 2.0


@pytest.mark.parametrize("k", [1, 2, 4])
def test_pca_matches_sklearn(k):
    from sklearn.decomposition import PCA

    X = anisotropic()
    coords, ratio = pca(X, k=k)
    ref = PCA(n_components=k, svd_solver="full").fit(X)
    ref_coords = ref.transform(X)
    assert isinstance(coords, np.ndarray) and coords.shape == (200, k) and ratio.shape == (k,)
    np.testing.assert_allclose(ratio, ref.explained_variance_ratio_, rtol=1e-10)
    # Compare up to a per-axis sign (sklearn changed its convention across versions), then pin ours exactly.
    signs = np.sign((coords * ref_coords).sum(0))
    np.testing.assert_allclose(coords, ref_coords * signs, atol=1e-9)


def test_pca_sign_convention_and_numpy_svd_ground_truth():
    X = anisotropic(seed=3)
    coords, ratio = pca(X, k=3)
    Xc = X - X.mean(0)
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    axes = np.linalg.lstsq(Xc, coords, rcond=None)[0].T  # recover the axes used
    np.testing.assert_allclose(np.abs(axes), np.abs(vt[:3]), atol=1e-9)
    assert np.all(axes[np.arange(3), np.abs(axes).argmax(1)] > 0)  # largest loading positive
    np.testing.assert_allclose(ratio, s[:3] ** 2 / (s**2).sum(), rtol=1e-10)
    # Sign is a function of the data, not of the sample order.
    perm = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_allclose(pca(X[perm], k=3)[0], coords[perm], atol=1e-9)


def test_pca_torch_in_torch_out_and_validation():
    X = torch.from_numpy(anisotropic()).float()
    coords, ratio = pca(X, k=2)
    assert isinstance(coords, torch.Tensor) and coords.dtype == torch.float32
    np.testing.assert_allclose(coords.numpy(), pca(X.double().numpy(), k=2)[0], atol=1e-3)
    assert ratio.sum() <= 1.0 + 1e-6
    with pytest.raises(ValueError):
        pca(X, k=7)
    with pytest.raises(ValueError):
        pca(X[0], k=1)


class FakeUMAP:
    """Stands in for umap.UMAP in the fast cache tests; records every fit."""

    fits: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def fit_transform(self, X):
        FakeUMAP.fits.append(self.kwargs)
        return X[:, :2] * 2.0


@pytest.fixture
def fake_umap(monkeypatch):
    monkeypatch.setitem(sys.modules, "umap", types.SimpleNamespace(UMAP=FakeUMAP))
    FakeUMAP.fits = []
    clear_umap_cache()
    yield FakeUMAP.fits
    clear_umap_cache()


def test_umap_cache_logic(fake_umap):
    X = blobs()
    emb = umap_embed(X, n_neighbors=10, seed=3)
    assert fake_umap == [
        dict(n_components=2, n_neighbors=10, min_dist=0.1, metric="euclidean", random_state=3, n_jobs=1)
    ]
    assert umap_embed(X.copy(), n_neighbors=10, seed=3) is emb  # equal bytes, different object: cache hit
    assert umap_embed(torch.from_numpy(X), n_neighbors=10, seed=3) is emb  # a tensor with the same values too
    assert len(fake_umap) == 1
    with pytest.raises(ValueError):
        emb[0, 0] = 1.0  # the shared cached array is read-only
    for kwargs in (dict(n_neighbors=11, seed=3), dict(n_neighbors=10, seed=4), dict(n_neighbors=10, min_dist=0.5)):
        assert umap_embed(X, **kwargs) is not emb
    X2 = X.copy()
    X2[0, 0] += 1e-3
    assert umap_embed(X2, n_neighbors=10, seed=3) is not emb
    assert len(fake_umap) == 5
    umap_embed(X[:5], n_neighbors=15)
    assert fake_umap[-1]["n_neighbors"] == 4  # capped at n - 1
    for i in range(20):  # LRU: the oldest entry is evicted
        umap_embed(X + i + 1)
    n_before = len(fake_umap)
    umap_embed(X, n_neighbors=10, seed=3)
    assert len(fake_umap) == n_before + 1
    with pytest.raises(ValueError):
        umap_embed(X[:2])


@pytest.mark.slow  # ~20 s on 2 cores: numba compiles UMAP on the first fit in a process
def test_umap_embed_real():
    X = blobs()
    clear_umap_cache()
    emb = umap_embed(X, n_neighbors=10)
    assert emb.shape == (90, 2) and emb.dtype == np.float32 and np.isfinite(emb).all()
    assert umap_embed(X, n_neighbors=10) is emb
    # Well-separated blobs stay separated: each point's nearest embedded neighbour is in its own blob.
    labels = np.repeat(np.arange(3), 30)
    dist = np.linalg.norm(emb[:, None] - emb[None], axis=-1)
    np.fill_diagonal(dist, np.inf)
    assert (labels[dist.argmin(1)] == labels).mean() > 0.95
    clear_umap_cache()
    again = umap_embed(X, n_neighbors=10)
    assert again is not emb
    np.testing.assert_array_equal(again, emb)  # seeded, single-threaded: reproducible
