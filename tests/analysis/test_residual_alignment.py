import math

import numpy as np
import pytest
import torch

from lab.analysis.residual_alignment import SCALARS, residual_alignment
from lab.nn.resnets import FCResNet


def _shared_linear_resnet(depth=4, width=12, in_dim=6, classes=3):
    """Linear blocks with identical weights: every residual Jacobian is the same matrix W2 W1."""
    torch.manual_seed(0)
    model = FCResNet(depth=depth, width=width, in_dim=in_dim, num_classes=classes, norm="none",
                     activation="identity")
    first = model.blocks[0].branch
    for block in model.blocks[1:]:
        block.branch.load_state_dict(first.state_dict())
    W = (first[-1].weight @ first[0].weight).detach().double()
    return model, W


def test_identical_jacobians_are_perfectly_aligned_and_share_their_spectrum():
    model, W = _shared_linear_resnet()
    x, y = torch.randn(10, 6), torch.arange(10) % 3
    model.train()
    out = residual_alignment(model, x, y, k=5, num_classes=3)
    assert model.training, "the training flag is restored"
    expected = torch.linalg.svdvals(W)[:5].numpy()
    np.testing.assert_allclose(out["sigma"], np.tile(expected, (4, 1)), rtol=1e-3)
    np.testing.assert_allclose(out["scores"], np.ones((4, 4)), atol=1e-3)
    assert out["align_offdiag"] == pytest.approx(1.0, abs=1e-3)
    assert out["grid"].shape == (1, 4, 4, 5, 5)
    np.testing.assert_allclose(np.abs(np.diagonal(out["grid"][0, 2, 1])), expected, rtol=1e-3)
    np.testing.assert_allclose(out["inv_sigma"], 1 / expected[0], rtol=1e-3)
    assert out["inv_sigma1_slope"] == pytest.approx(0.0, abs=1e-4)
    assert float(out["topk_ratio"]) == pytest.approx(expected[:3].mean() / expected[3:].mean(), rel=1e-3)
    assert 0 < float(out["baseline_mean"]) < 0.6, "random bases put about 1/k of the energy on the diagonal"


def test_shapes_trajectories_and_collapse():
    torch.manual_seed(1)
    model = FCResNet(depth=3, width=16, in_dim=8, num_classes=4)
    x, y = torch.randn(12, 8), torch.arange(12) % 4
    nc_x, nc_y = torch.randn(40, 8), torch.arange(40) % 4
    out = residual_alignment(model, x, y, k=6, nc_x=nc_x, nc_y=nc_y, grid_inputs=2)
    assert out["sigma"].shape == (3, 6) and out["scores"].shape == (3, 3) and out["grid"].shape[:1] == (2,)
    assert out["traj_pca"].shape == (4, 12, 2) and out["traj_gauss"].shape == (4, 12, 2)
    assert out["traj_means_pca"].shape == (4, 4, 2)
    np.testing.assert_allclose(out["traj_means_pca"][:, 1], out["traj_pca"][:, y == 1].mean(axis=1), atol=1e-9)
    assert out["nc1"].shape == (4,) and np.all((out["ncc_accuracy"] >= 0) & (out["ncc_accuracy"] <= 1))
    assert math.isfinite(float(out["nc3"][-1])) and np.isnan(out["nc3"][:-1]).all(), "NC3 needs the classifier"
    off = out["scores"][~np.eye(3, dtype=bool)]
    assert float(out["align_offdiag"]) == pytest.approx(off.mean())
    assert float(out["topk_ratio"]) == pytest.approx(out["sigma"][:, :4].mean() / out["sigma"][:, 4:].mean())
    assert set(SCALARS) <= set(out)


def test_conv_stages_of_different_shape_are_undefined_pairs():
    from lab.nn.resnets import ConvResNet

    torch.manual_seed(0)
    model = ConvResNet(depths=(1, 1), channels=(2, 4), in_chans=1, feature_size=None, num_classes=3).eval()
    x, y = torch.randn(4, 1, 4, 4), torch.arange(4) % 3
    out = residual_alignment(model, x, y, k=3)
    assert np.isnan(out["scores"][0, 1]) and np.isnan(out["scores"][1, 0])
    assert np.isfinite(out["scores"][0, 0]) and np.isfinite(out["sigma"]).all()
    assert out["traj_pca"].shape[0] == 2, "trajectories live in the last stage's space"


def test_ra4_is_fitted_from_block_5_as_the_papers_figure_4b_and_every_nc_metric_is_reported():
    from lab.analysis.alignment import inverse_sigma_fit
    from lab.analysis.collapse import collapse_metrics
    from lab.analysis.residual_alignment import NC_KEYS, PAPER_K, RA4_FIT_START

    assert (RA4_FIT_START, PAPER_K) == (4, 30)  # "post block 5" (Fig. 4b); K = 30 (Fig. 2)
    torch.manual_seed(2)
    model = FCResNet(depth=9, width=16, in_dim=8, num_classes=4)
    x, y = torch.randn(12, 8), torch.arange(12) % 4
    out = residual_alignment(model, x, y, k=6)
    sigma1 = out["sigma"][:, 0]
    assert int(out["fit_start"]) == 4
    assert float(out["inv_sigma1_slope"]) == pytest.approx(inverse_sigma_fit(sigma1, start=4)["slope"])
    np.testing.assert_allclose(out["inv_sigma_fit"][4:], inverse_sigma_fit(sigma1, start=4)["fit"][4:])
    assert np.isnan(out["inv_sigma_fit"][:4]).all()  # drawn where it was fitted
    whole = residual_alignment(model, x, y, k=6, fit_start=0)
    assert float(whole["inv_sigma1_slope"]) == pytest.approx(inverse_sigma_fit(sigma1, start=0)["slope"])
    assert int(residual_alignment(FCResNet(depth=3, width=16, in_dim=8, num_classes=4), x, y, k=6)["fit_start"]) \
        == 1  # fewer blocks: the last two
    # the maximal-equiangularity NC2 and the classifier's NC2 are reported, the latter at the last layer
    assert {"nc2_maxangle", "nc2_w_equinorm", "nc2_w_equiangular", "nc2_w_maxangle"} <= set(NC_KEYS)
    model.eval()  # as the analysis runs it (BatchNorm on its running statistics)
    with torch.no_grad():  # the last layer: the final state as the classifier sees it
        state = model.forward_intermediates(x, intermediates_only=True)[-1]
        pool = getattr(model, "pool_features", None)
        features = (pool(state) if pool is not None else state.flatten(1)).double()
    last = collapse_metrics(features, y, classifier_weight=model.head.weight, classifier_bias=model.head.bias)
    for key in NC_KEYS:
        assert out[key].shape == (10,) and float(out[key][-1]) == pytest.approx(last[key]), key
    assert np.isnan(out["nc2_w_maxangle"][:-1]).all()
