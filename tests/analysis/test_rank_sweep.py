"""Rank and probe metrics across sweep members: known ranks, a probe that agrees with linear_probe, Pearson r."""

import math

import numpy as np
import pytest
import torch

from lab.analysis.probing import linear_probe
from lab.analysis.rank_sweep import member_features, ridge_probe_accuracy, sweep_rank_metrics
from lab.nn.mlp import ResidualMLP


def flat_spectrum(n: int, d: int, r: int, seed: int = 0) -> torch.Tensor:
    """[n, d] with r equal singular values and rows orthogonal to the all-ones vector (sample centring keeps it)."""
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))[0]
    A = torch.randn(d, r, generator=g, dtype=torch.float64)
    A = A - A.mean(0)  # columns ⊥ 1
    V = torch.linalg.qr(A)[0]
    return 3.0 * U @ V.T


def blobs(n_per: int, C: int = 3, d: int = 16, seed: int = 0, sep: float = 8.0):
    """Classes at ``sep``-separated centres with unit noise: linearly separable with overwhelming probability."""
    centres = sep * torch.linalg.qr(torch.randn(d, C, generator=torch.Generator().manual_seed(99)))[0].T
    y = torch.arange(C).repeat_interleave(n_per)
    X = centres[y] + torch.randn(len(y), d, generator=torch.Generator().manual_seed(seed))
    return X * torch.logspace(-1, 1, d) + 5.0, y  # unequal scales and an offset: the probe standardises


def stack(*layers_per_member: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([torch.stack(layers) for layers in layers_per_member]).float()


def test_member_features_are_every_depth_in_eval_mode_and_restore_the_mode():
    models = [ResidualMLP(depth=3, width=8, alpha_min=a, shortcut="linear", drop_path_rate=0.5) for a in (1.0, 0.5)]
    x = torch.randn(20, 2)
    feats = member_features(models, x)
    assert feats.shape == (2, 4, 20, 8)
    for k, model in enumerate(models):
        assert model.training
        model.eval()
        expected = model.forward_intermediates(x, intermediates_only=True)
        for layer in range(4):
            torch.testing.assert_close(feats[k, layer], expected[layer])


def test_known_ranks_give_their_analytic_values():
    n, d, r = 300, 16, 5
    exact = flat_spectrum(n, d, r)
    g = torch.Generator().manual_seed(1)
    gaussian = torch.randn(n, r, generator=g, dtype=torch.float64) @ torch.linalg.qr(
        torch.randn(d, r, generator=g, dtype=torch.float64))[0].T  # rank r, nearly equal singular values
    full = torch.randn(n, d, generator=g, dtype=torch.float64)
    train = stack([exact, gaussian, full])
    labels = torch.zeros(n, dtype=torch.long)
    labels[::2] = 1
    out = sweep_rank_metrics(train, labels, train, labels)
    assert out["effective_rank"].shape == out["eq6_entropy"].shape == out["probe_acc"].shape == (1, 3)
    assert out["effective_rank"].dtype == np.float32
    assert out["effective_rank"][0, 0] == pytest.approx(r, rel=1e-4)  # flat spectrum: exp(log r)
    assert out["eq6_entropy"][0, 0] == pytest.approx(math.log(r), rel=1e-4)  # Eq. 6 is H itself
    assert out["effective_rank"][0, 1] == pytest.approx(r, rel=0.03)
    assert r < out["effective_rank"][0, 2] <= d
    assert out["pca"].shape == (1, n, 2) and out["labels"].tolist() == labels.tolist()


def test_identical_members_give_identical_rows_and_no_correlation():
    X, y = blobs(40)
    layers = [X, X * 2, X[:, :4].repeat(1, 4)]
    feats = stack(layers, layers, layers)
    out = sweep_rank_metrics(feats, y, feats, y)
    for key in ("effective_rank", "eq6_entropy", "probe_acc", "pca"):
        np.testing.assert_array_equal(out[key][0], out[key][1])
        np.testing.assert_array_equal(out[key][0], out[key][2])
    assert np.isnan(out["pearson_r_effective_rank"]) and np.isnan(out["pearson_r_eq6_entropy"])  # zero variance


def graded_members(K: int = 5, seed: int = 0):
    """Member k sees only the first k+1 of the blobs' coordinates: rank and probe accuracy both grow with k."""
    Xtr, ytr = blobs(60, C=4, d=8, seed=seed, sep=3.0)
    Xte, yte = blobs(60, C=4, d=8, seed=seed + 1, sep=3.0)
    noise = torch.Generator().manual_seed(7)

    def member(X: torch.Tensor, k: int) -> list[torch.Tensor]:
        kept = torch.cat([X[:, :k + 1], 0.01 * torch.randn(len(X), 7 - k, generator=noise)], 1)
        return [X, kept]

    return (stack(*(member(Xtr, k) for k in range(K))), ytr, stack(*(member(Xte, k) for k in range(K))), yte)


def test_pearson_r_matches_numpy_corrcoef():
    out = sweep_rank_metrics(*graded_members())
    for measure in ("effective_rank", "eq6_entropy"):
        expected = np.corrcoef(out[measure][:, -1].astype(np.float64), out["probe_acc"][:, -1].astype(np.float64))
        assert out[f"pearson_r_{measure}"] == pytest.approx(expected[0, 1], abs=1e-12)
        assert out[f"pearson_r_{measure}"] > 0.5
    assert len(set(out["probe_acc"][:, -1].tolist())) > 2


def test_pearson_r_needs_three_members_and_follows_the_mask():
    Xtr, ytr, Xte, yte = graded_members()
    two = sweep_rank_metrics(Xtr[:2], ytr, Xte[:2], yte)
    assert np.isnan(two["pearson_r_effective_rank"]) and np.isnan(two["pearson_r_eq6_entropy"])
    mask = np.array([True, False, True, True, True])
    out = sweep_rank_metrics(Xtr, ytr, Xte, yte, correlate=mask)
    expected = np.corrcoef(out["effective_rank"][mask, -1].astype(np.float64),
                           out["probe_acc"][mask, -1].astype(np.float64))[0, 1]
    assert out["pearson_r_effective_rank"] == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="one flag per member"):
        sweep_rank_metrics(Xtr, ytr, Xte, yte, correlate=[True])


def test_a_member_with_non_finite_features_gets_nan_rows_and_leaves_the_others_alone():
    Xtr, ytr, Xte, yte = graded_members()
    clean = sweep_rank_metrics(Xtr, ytr, Xte, yte)
    Xtr, Xte = Xtr.clone(), Xte.clone()
    Xte[1, 1, 3, 0] = float("inf")
    Xtr[3, 0, 0, 0] = float("nan")
    out = sweep_rank_metrics(Xtr, ytr, Xte, yte)
    keep = [0, 2, 4]
    for key in ("effective_rank", "eq6_entropy", "probe_acc", "pca"):
        assert np.isnan(out[key][[1, 3]]).all()
        np.testing.assert_array_equal(out[key][keep], clean[key][keep])
    expected = np.corrcoef(out["effective_rank"][keep, -1].astype(np.float64),
                           out["probe_acc"][keep, -1].astype(np.float64))[0, 1]
    assert out["pearson_r_effective_rank"] == pytest.approx(expected, abs=1e-12)


def test_huge_finite_features_give_the_metrics_of_their_scaled_down_selves():
    Xtr, ytr, Xte, yte = graded_members()
    clean = sweep_rank_metrics(Xtr, ytr, Xte, yte)
    out = sweep_rank_metrics(Xtr * 1e30, ytr, Xte * 1e30, yte)  # squares overflow float32
    for key in ("effective_rank", "eq6_entropy"):
        np.testing.assert_allclose(out[key], clean[key], rtol=1e-4)
    np.testing.assert_array_equal(out["probe_acc"], clean["probe_acc"])
    np.testing.assert_allclose(out["pca"] / 1e30, clean["pca"], atol=1e-5 * np.abs(clean["pca"]).max())


def test_ridge_probe_agrees_with_linear_probe_on_separable_classes():
    Xtr, ytr = blobs(100, seed=0)
    Xte, yte = blobs(100, seed=1)
    ours = ridge_probe_accuracy(Xtr, ytr, Xte, yte)
    assert ours.shape == () and float(ours) == 1.0
    assert linear_probe(Xtr, ytr, Xte, yte, epochs=30)["test_acc"] == 1.0
    batched = ridge_probe_accuracy(torch.stack([Xtr, -Xtr]), ytr, torch.stack([Xte, -Xte]), yte)
    assert batched.tolist() == [1.0, 1.0]


def test_ridge_probe_is_at_chance_on_random_labels():
    g = torch.Generator().manual_seed(5)
    Xtr, Xte = torch.randn(400, 20, generator=g), torch.randn(2000, 20, generator=g)
    ytr, yte = torch.randint(0, 2, (400,), generator=g), torch.randint(0, 2, (2000,), generator=g)
    assert abs(float(ridge_probe_accuracy(Xtr, ytr, Xte, yte)) - 0.5) < 0.05
    assert float(ridge_probe_accuracy(Xtr, ytr, Xtr, ytr)) > 0.55  # it can only memorise


def test_constant_features_do_not_break_the_probe():
    Xtr, ytr = blobs(50, C=2)
    Xtr = torch.cat([Xtr, torch.full((len(Xtr), 3), 7.0)], 1)
    assert float(ridge_probe_accuracy(Xtr, ytr, Xtr, ytr)) == 1.0
    zeros = torch.zeros(1, 2, 100, 8)
    out = sweep_rank_metrics(zeros, ytr, zeros, ytr)
    assert (out["effective_rank"] == 0).all() and (out["eq6_entropy"] == 0).all()


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match=r"\[K, L\+1, n, H\]"):
        sweep_rank_metrics(torch.zeros(2, 10, 4), torch.zeros(10), torch.zeros(2, 10, 4), torch.zeros(10))


def test_the_few_label_probe_reads_what_a_few_labels_can_separate():
    """Features where one direction carries the class and many carry noise: five labels per class find the class
    direction only when it is large against the noise; the full probe finds it either way."""
    from lab.analysis.rank_sweep import few_label_probe_accuracy, ridge_probe_accuracy

    g = torch.Generator().manual_seed(0)
    y = torch.arange(600) % 3
    signal = torch.nn.functional.one_hot(y, 3).double()
    noise = torch.randn(600, 13, generator=g, dtype=torch.float64)
    clear = torch.cat([signal + 0.1 * noise[:, :3], noise[:, 3:]], 1)  # the class stands out in three directions
    faint = torch.cat([signal + 0.8 * noise[:, :3], noise[:, 3:]], 1)  # ... or hides in their noise
    feats = torch.stack([clear, faint])  # [2, n, d]: two feature sets at once
    few = few_label_probe_accuracy(feats[:, :400], y[:400], feats[:, 400:], y[400:], per_class=5, draws=10)
    full = ridge_probe_accuracy(feats[:, :400], y[:400], feats[:, 400:], y[400:])
    assert few.shape == (2,) and few[0] > 0.9 and few[1] < 0.6 and full[1] > few[1] + 0.1
    again = few_label_probe_accuracy(feats[:, :400], y[:400], feats[:, 400:], y[400:], per_class=5, draws=10)
    assert torch.equal(few, again)  # the draws are seeded
    with pytest.raises(ValueError, match="fewer than 500 training points"):
        few_label_probe_accuracy(feats[:, :400], y[:400], feats[:, 400:], y[400:], per_class=500)


def test_layer_rank_metrics_measure_layers_of_any_width_as_a_one_member_sweep_does():
    from lab.analysis.rank_sweep import layer_rank_metrics

    g = torch.Generator().manual_seed(0)
    y_tr, y_te = torch.arange(60) % 3, torch.arange(45) % 3
    widths = (4, 9, 6)
    tr = [torch.randn(60, w, generator=g) + y_tr[:, None].float() for w in widths]
    te = [torch.randn(45, w, generator=g) + y_te[:, None].float() for w in widths]
    out = layer_rank_metrics(tr, y_tr, te, y_te)
    assert list(out["width"]) == list(widths)
    for i in range(len(widths)):
        one = sweep_rank_metrics(tr[i][None, None], y_tr, te[i][None, None], y_te)
        for key in ("effective_rank", "eq6_entropy", "probe_acc"):
            assert out[key][i] == pytest.approx(float(one[key][0, 0]), rel=1e-6), key
    rank_one = [torch.randn(60, 1, generator=g) @ torch.ones(1, 5), torch.randn(45, 1, generator=g) @ torch.ones(1, 5)]
    low = layer_rank_metrics([rank_one[0]], y_tr, [rank_one[1]], y_te)
    assert low["effective_rank"][0] == pytest.approx(1.0, abs=1e-3)  # a rank-one layer has effective rank 1
    with pytest.raises(ValueError, match="same layers"):
        layer_rank_metrics(tr, y_tr, te[:2], y_te)
