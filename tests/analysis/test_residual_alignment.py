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
    out = residual_alignment(model, x, y, k=6, num_classes=3)
    assert model.training, "the training flag is restored"
    expected = torch.linalg.svdvals(W)[:6].numpy()
    np.testing.assert_allclose(out["sigma"], np.tile(expected, (4, 1)), rtol=1e-3)
    np.testing.assert_allclose(out["scores"], np.ones((4, 4)), atol=1e-3)
    assert out["align_offdiag"] == pytest.approx(1.0, abs=1e-3)
    assert out["grid"].shape == (1, 4, 4, 6, 6)
    np.testing.assert_allclose(np.abs(np.diagonal(out["grid"][0, 2, 1])), expected, rtol=1e-3)
    np.testing.assert_allclose(out["inv_sigma"], 1 / expected[0], rtol=1e-3)
    assert out["inv_sigma1_slope"] == pytest.approx(0.0, abs=1e-4)
    # RA3 as the paper's Fig. 4a compares them: the top C singular values against the next C
    assert float(out["topk_ratio"]) == pytest.approx(expected[:3].mean() / expected[3:6].mean(), rel=1e-3)
    assert 0 < float(out["baseline_mean"]) < 0.6, "random bases put about 1/k of the energy on the diagonal"


def test_shapes_trajectories_and_collapse():
    torch.manual_seed(1)
    model = FCResNet(depth=3, width=16, in_dim=8, num_classes=4)
    x, y = torch.randn(12, 8), torch.arange(12) % 4
    nc_x, nc_y = torch.randn(40, 8), torch.arange(40) % 4
    out = residual_alignment(model, x, y, k=9, nc_x=nc_x, nc_y=nc_y, grid_inputs=2)
    assert out["sigma"].shape == (3, 9) and out["scores"].shape == (3, 3) and out["grid"].shape[:1] == (2,)
    assert out["traj_pca"].shape == (4, 12, 2) and out["traj_gauss"].shape == (4, 12, 2)
    assert out["traj_means_pca"].shape == (4, 4, 2)
    np.testing.assert_allclose(out["traj_means_pca"][:, 1], out["traj_pca"][:, y == 1].mean(axis=1), atol=1e-9)
    assert out["nc1"].shape == (4,) and np.all((out["ncc_accuracy"] >= 0) & (out["ncc_accuracy"] <= 1))
    assert math.isfinite(float(out["nc3"][-1])) and np.isnan(out["nc3"][:-1]).all(), "NC3 needs the classifier"
    off = out["scores"][~np.eye(3, dtype=bool)]
    assert float(out["align_offdiag"]) == pytest.approx(off.mean())
    assert float(out["topk_ratio"]) == pytest.approx(out["sigma"][:, :4].mean() / out["sigma"][:, 4:8].mean())
    assert set(SCALARS) <= set(out)


def test_conv_stages_of_different_shape_are_undefined_pairs():
    from lab.nn.resnets import ConvResNet

    torch.manual_seed(0)
    model = ConvResNet(depths=(1, 1), channels=(2, 4), in_chans=1, feature_size=None, num_classes=3).eval()
    x, y = torch.randn(4, 1, 4, 4), torch.arange(4) % 3
    out = residual_alignment(model, x, y, k=3)
    assert np.isnan(out["scores"][0, 1]) and np.isnan(out["scores"][1, 0])
    assert np.isfinite(out["scores"][0, 0]) and np.isfinite(out["sigma"]).all()
    assert out["traj_pca"].shape[0] == 2, "trajectories live in one stage's space"


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


def test_ra1_is_measured_per_stage_never_across_layouts_of_one_size():
    """Stage 1's states are 2 × 4 × 4 and stage 2's 8 × 2 × 2: one size (32), two spaces. Matched by size, the two
    stages' states would form one trajectory; RA1 measures each stage alone and reports the longest."""
    from lab.analysis.residual_alignment import alignment_reasons, stages_of
    from lab.analysis.trajectories import trajectory_stats
    from lab.nn.resnets import ConvResNet

    torch.manual_seed(3)
    model = ConvResNet(depths=(4, 3), channels=(2, 8), in_chans=1, feature_size=None, num_classes=3).eval()
    x, y = torch.randn(6, 1, 4, 4), torch.arange(6) % 3
    out = residual_alignment(model, x, y, k=4, fit_start=0)
    with torch.no_grad():
        states = model.forward_intermediates(x, intermediates_only=True)
    shapes = [tuple(h.shape[1:]) for h in states]
    assert {math.prod(s) for s in shapes} == {32} and len(set(shapes)) == 2  # one size, two layouts
    np.testing.assert_array_equal(out["stage"], stages_of(shapes))
    np.testing.assert_array_equal(out["stage"], [0, 0, 0, 0, 1, 1, 1, 1])
    for s in (0, 1):
        alone = trajectory_stats(torch.stack([h.flatten(1) for h, st in zip(states, out["stage"], strict=True)
                                              if st == s]))
        assert float(out["straightness_by_stage"][s]) == pytest.approx(alone["straightness"])
        assert float(out["spacing_cv_by_stage"][s]) == pytest.approx(alone["spacing_cv"])
    mixed = trajectory_stats(torch.stack([h.flatten(1) for h in states]))
    assert int(out["ra1_stage"]) == 1, "a tie of four states each: the later stage"
    assert float(out["straightness"]) == pytest.approx(float(out["straightness_by_stage"][1]))
    assert float(out["straightness"]) != pytest.approx(mixed["straightness"], rel=1e-3)
    assert out["traj_pca"].shape[0] == 4
    # RA4: the blocks of stage 1 that keep its layout, never across the projection
    assert (int(out["fit_start"]), int(out["fit_stop"])) == (0, 4)
    assert np.isnan(out["inv_sigma_fit"][4:]).all() and np.isfinite(out["inv_sigma_fit"][:4]).all()
    assert "straightness" not in alignment_reasons(out)


def test_ra1_and_ra4_of_one_block_per_stage_are_said_not_trivial():
    """At a size where every stage has one block, one step is trivially straight and equally spaced: RA1 and RA4
    are n/a, with the reason."""
    from lab.analysis.residual_alignment import alignment_reasons
    from lab.nn.resnets import ConvResNet

    torch.manual_seed(4)
    model = ConvResNet(depths=(1, 1), channels=(2, 4), in_chans=1, feature_size=None, num_classes=3).eval()
    out = residual_alignment(model, torch.randn(4, 1, 4, 4), torch.arange(4) % 3, k=3)
    assert np.isnan(out["straightness"]) and np.isnan(out["spacing_cv"]) and np.isnan(out["inv_sigma1_slope"])
    reasons = alignment_reasons(out)
    assert "longest stage has 1 block" in reasons["straightness"]
    assert "two or more blocks of one stage that keep its layout; from block 1 on" in reasons["inv_sigma1_slope"]
    assert "no two blocks act on one space" in reasons["align_offdiag"]


def test_a_zero_residual_branch_is_the_reason_not_a_bare_nan():
    """timm zero-initialises each branch's last norm: every residual Jacobian is 0, and the result says so."""
    from lab.analysis.residual_alignment import alignment_reasons

    torch.manual_seed(5)
    model = FCResNet(depth=6, width=16, in_dim=8, num_classes=3)
    for block in model.blocks:
        torch.nn.init.zeros_(block.branch[-1].weight)
        torch.nn.init.zeros_(block.branch[-1].bias)
    out = residual_alignment(model, torch.randn(8, 8), torch.arange(8) % 3, k=6, fit_start=0)
    assert np.all(out["sigma"] == 0)
    reasons = alignment_reasons(out)
    for key in ("align_offdiag", "topk_ratio", "inv_sigma1_slope", "inv_sigma1_r2"):
        assert np.isnan(out[key]), key
        assert "blocks 1–6 of 6 have a zero residual Jacobian" in reasons[key], key
    assert "zero_init_last" in reasons["align_offdiag"]


def test_ra3_below_2c_and_a_foreign_head_are_said():
    from lab.analysis.residual_alignment import alignment_reasons

    torch.manual_seed(6)
    model = FCResNet(depth=3, width=16, in_dim=8, num_classes=10)  # a head for 10 classes, data of 3
    x, y = torch.randn(12, 8), torch.arange(12) % 3
    out = residual_alignment(model, x, y, k=5, num_classes=3)
    assert np.isnan(out["topk_ratio"])
    reasons = alignment_reasons(out)
    assert "needs K ≥ 6, and K = 5" in reasons["topk_ratio"]
    assert "head has 10 outputs and the data 3 classes" in reasons["head"]
    assert np.isnan(out["nc3"][-1]) and np.isnan(out["nc2_w_equinorm"][-1]), "the head is not the data's classifier"
    fitting = FCResNet(depth=3, width=16, in_dim=8, num_classes=3)
    assert np.isfinite(residual_alignment(fitting, x, y, k=6)["nc3"][-1]) and "head" not in alignment_reasons(
        residual_alignment(fitting, x, y, k=6))


def test_ra2_carries_intervals_over_inputs_and_draws():
    torch.manual_seed(7)
    model = FCResNet(depth=4, width=16, in_dim=8, num_classes=3)
    x, y = torch.randn(16, 8), torch.arange(16) % 3
    out = residual_alignment(model, x, y, k=6, baseline_trials=8)
    lo, hi = out["align_offdiag_ci"]
    assert lo < float(out["align_offdiag"]) < hi
    assert int(out["ra2_pairs"]) == 12 and out["align_offdiag_per_input"].shape == (16,)
    assert float(out["align_offdiag"]) == pytest.approx(np.mean(out["align_offdiag_per_input"]))
    assert out["baseline_trials"].shape == (8, 4)
    np.testing.assert_allclose(out["baseline"], out["baseline_trials"].mean(axis=0), rtol=1e-6)
    b_lo, b_hi = out["baseline_ci"]
    assert b_lo < float(out["baseline_mean"]) < b_hi and b_hi - b_lo < 0.1


def _expected_scores(jacobians: list[torch.Tensor], k: int) -> np.ndarray:
    """RA2's score of every pair from the exact Jacobians: the diagonal energy share of U_{j,K}ᵀ J_i V_{j,K}, with
    ``torch.linalg.svd`` in float64."""
    svds = [torch.linalg.svd(J.double()) for J in jacobians]
    L = len(jacobians)
    out = np.empty((L, L))
    for i, J in enumerate(jacobians):
        for j, (U, _, Vh) in enumerate(svds):
            A = U[:, :k].T @ J.double() @ Vh[:k].T
            out[i, j] = float((A.diagonal() ** 2).sum() / (A**2).sum())
    return out


def _two_weight_sets(blocks: list[torch.nn.Module]) -> None:
    """Blocks 0, 2, 4 … take block 0's weights, blocks 1, 3, 5 … block 1's: two Jacobians, repeated."""
    for i, block in enumerate(blocks[2:], start=2):
        block.load_state_dict(blocks[i % 2].state_dict())


def test_ra2_of_a_conv_net_built_to_share_its_jacobians_is_the_value_known_in_advance():
    """Linear conv blocks (no norm, identity activation) have one Jacobian at every input; with two weight sets in
    turn, pairs of one set score 1 and mixed pairs the value the exact SVDs give."""
    from lab.nn.resnets import ConvResNet

    torch.manual_seed(8)
    model = ConvResNet(depths=(4,), channels=(2,), in_chans=1, feature_size=None, num_classes=3, norm="none",
                       activation="identity").eval()
    blocks = [b for _, b in model.iter_blocks()]
    _two_weight_sets(blocks)
    x = torch.randn(3, 1, 4, 4)
    with torch.no_grad():
        h = model.forward_intermediates(x[:1], intermediates_only=True)[0][0]
    jacobians = [torch.func.jacrev(lambda v, b=b: (b(v[None]) - v[None])[0])(h).reshape(h.numel(), h.numel())
                 for b in blocks]
    assert not torch.allclose(jacobians[0], jacobians[1])
    expected = _expected_scores(jacobians, k=4)
    assert expected[0, 2] == pytest.approx(1.0) and expected[1, 0] < 0.9, "a known, non-trivial value"
    out = residual_alignment(model, x, torch.arange(3), k=4, num_classes=3)
    np.testing.assert_allclose(out["scores"], expected, atol=2e-3)


def test_ra2_of_a_vit_built_to_share_its_jacobians_is_the_value_known_in_advance():
    """A timm ViT on one token (no class token, one patch) with identity norms and activation: its attention is
    P W_v and its MLP W_2 W_1 at every input; each block's two steps are blocks of the analysis."""
    import timm

    from lab.nn.timm_vit import TimmViT

    torch.manual_seed(9)
    vit = timm.models.vision_transformer.VisionTransformer(
        img_size=8, patch_size=8, in_chans=1, embed_dim=12, depth=3, num_heads=1, class_token=False,
        global_pool="avg", norm_layer=torch.nn.Identity, act_layer=torch.nn.Identity, num_classes=3)
    for block in vit.blocks[1:]:
        block.load_state_dict(vit.blocks[0].state_dict())
    model = TimmViT(vit).eval()
    steps = [b for _, b in model.iter_blocks()]
    assert len(steps) == 6
    first = vit.blocks[0]
    W_v = first.attn.qkv.weight[24:36]  # q, k, v rows of the fused projection
    J_attn = (first.attn.proj.weight @ W_v).detach()
    J_mlp = (first.mlp.fc2.weight @ first.mlp.fc1.weight).detach()
    expected = _expected_scores([J_attn, J_mlp] * 3, k=4)
    assert expected[0, 2] == pytest.approx(1.0) and expected[1, 0] < 0.9
    x = torch.randn(3, 1, 8, 8)
    out = residual_alignment(model, x, torch.arange(3), k=4, num_classes=3)
    np.testing.assert_allclose(out["scores"], expected, atol=2e-3)
