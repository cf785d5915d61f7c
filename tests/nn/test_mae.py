"""The MAE ViT of *Residual Connections Harm Generative Representation Learning*: decayed encoder shortcuts, masking,
loss, U-Net skips, the analysis surface and the registered sizes."""

import inspect

import pytest
import timm
import torch
from torch.func import jvp

from lab.analysis.alignment_stats import alignment_stats
from lab.analysis.jacobian import residual_jacobians
from lab.hooks import capture, eval_mode
from lab.nn.mae import MaskedAutoencoderViT, unshuffle
from lab.nn.registry import create_model, list_models, model_parameters
from lab.nn.vit_block import DecayedBlock, sublayer_scales
from lab.shortcuts import SCHEDULES, alphas, branch_scales

# img 8, patch 4: 4 patches + cls = 5 tokens of width 16, so a block's Jacobian is 80 × 80
TINY = {"img_size": 8, "patch_size": 4, "in_chans": 3, "embed_dim": 16, "depth": 2, "num_heads": 2,
        "decoder_embed_dim": 16, "decoder_depth": 2, "decoder_num_heads": 2}


def tiny(**overrides) -> MaskedAutoencoderViT:
    torch.manual_seed(0)
    return MaskedAutoencoderViT(**{**TINY, **overrides})


def images(n: int = 2, size: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def set_fused(model: torch.nn.Module, fused: bool) -> int:
    switches = [m for m in model.modules() if hasattr(m, "fused_attn")]
    for m in switches:
        m.fused_attn = fused
    return len(switches)


# ---------------------------------------------------------------------- shortcuts


@pytest.mark.parametrize("alpha_min", [1.0, 0.6, 0.3])
def test_sublayer_alphas_read_back_off_the_model(alpha_min):
    model = tiny(depth=3, alpha_min=alpha_min)  # shortcut="sublayer" by default
    read = [a for block in model.blocks for a in (block.alpha_attn, block.alpha_mlp)]
    assert read == pytest.approx(alphas("sublayer", 3, alpha_min), abs=0)
    assert read[0] == 1.0 and read[-1] == pytest.approx(alpha_min)
    for block in model.blocks:
        assert block.alpha == block.alpha_attn * block.alpha_mlp and block.beta == 1.0
    assert all(b.alpha_attn == b.alpha_mlp == b.beta == 1.0 for b in model.decoder_blocks)  # decoder: standard


@pytest.mark.parametrize("schedule", [s for s in SCHEDULES if s != "sublayer"])
def test_other_schedules_give_each_block_its_alpha_and_beta(schedule):
    model = tiny(depth=3, shortcut=schedule, alpha_min=0.5)
    expected_a, expected_b = alphas(schedule, 3, 0.5), branch_scales(schedule, 3)
    for block, a, b in zip(model.blocks, expected_a, expected_b, strict=True):
        assert (block.alpha_attn, block.alpha_mlp, block.beta) == (a, a, b)


def test_decay_on_one_sublayer_keeps_the_other_shortcut():
    full = sublayer_scales("sublayer", 4, 0.6)
    assert [(a, 1.0, b) for a, _, b in full] == sublayer_scales("sublayer", 4, 0.6, decay_on="attn")
    assert [(1.0, m, b) for _, m, b in full] == sublayer_scales("sublayer", 4, 0.6, decay_on="mlp")
    with pytest.raises(ValueError, match="decay_on"):
        sublayer_scales("sublayer", 4, 0.6, decay_on="norm")


@pytest.mark.parametrize("scales", [(0.9, 0.7, 1.0), (0.5 ** 0.5, 0.5 ** 0.5, 0.5 ** 0.5), (0.0, 0.0, 1.0)])
def test_block_is_its_equation_and_shortcut_plus_branch(scales):
    torch.manual_seed(0)
    block = DecayedBlock(16, 2, alpha_attn=scales[0], alpha_mlp=scales[1], beta=scales[2], zero_init=False)
    h = torch.randn(3, 5, 16)
    a_attn, a_mlp, beta = scales
    h1 = a_attn * h + beta * block.attn(block.norm1(h))
    expected = a_mlp * h1 + beta * block.mlp(block.norm2(h1))
    out = block(h)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert block.alpha == pytest.approx(a_attn * a_mlp)
    torch.testing.assert_close(block.shortcut(h) + block.beta * block.branch(h), out, rtol=1e-6, atol=1e-6)
    assert list(block.branch.parameters()) == [] and "branch" not in str(list(block.state_dict()))


def test_zero_init_makes_an_untrained_encoder_block_the_scaled_identity():
    h = torch.randn(2, 5, 16)
    for block in tiny(depth=3, alpha_min=0.4).blocks:
        torch.testing.assert_close(block(h), block.alpha * h)
    for block in tiny(depth=3, alpha_min=0.4, zero_init=False).blocks:
        assert not torch.allclose(block(h), block.alpha * h, atol=1e-3)


# ---------------------------------------------------------------------- patches, masking, loss


def test_patchify_unpatchify_round_trip_and_layout():
    model = tiny(img_size=(8, 12))  # a 2 × 3 grid of 4 × 4 patches
    imgs = torch.randn(2, 3, 8, 12)
    patches = model.patchify(imgs)
    assert patches.shape == (2, 6, 4 * 4 * 3)
    torch.testing.assert_close(model.unpatchify(patches), imgs, rtol=0, atol=0)
    # patch 5 is row 1, column 2 of the grid; its pixels in (row, column, channel) order
    torch.testing.assert_close(patches[:, 5], imgs[:, :, 4:8, 8:12].permute(0, 2, 3, 1).reshape(2, -1))


@pytest.mark.parametrize("ratio", [0.75, 0.5, 0.3, 0.0])
def test_masking_keeps_round_n_patches_per_sample_reproducibly(ratio):
    N = 64
    x = torch.arange(N, dtype=torch.float32)[None, :, None].expand(4, N, 2)  # token n carries n
    x_masked, mask, ids_restore = MaskedAutoencoderViT.random_masking(x, ratio, seeded(3))
    keep = round(N * (1 - ratio))
    assert x_masked.shape == (4, keep, 2)
    assert mask.sum(dim=1).tolist() == [N - keep] * 4
    kept = x_masked[..., 0].long()
    assert (mask.gather(1, kept) == 0).all()  # the kept tokens are exactly the unmasked ones
    full = unshuffle(torch.cat([torch.zeros(4, 1, 2), x_masked], 1), ids_restore, torch.full((1, 1, 2), -1.0))
    torch.testing.assert_close(full[:, 1:, 0], torch.where(mask.bool(), -1.0, x[..., 0]))
    again = MaskedAutoencoderViT.random_masking(x, ratio, seeded(3))[1]
    torch.testing.assert_close(again, mask)
    torch.manual_seed(5)
    m1 = MaskedAutoencoderViT.random_masking(x, ratio)[1]
    torch.manual_seed(5)
    torch.testing.assert_close(MaskedAutoencoderViT.random_masking(x, ratio)[1], m1)
    if 0 < keep < N:
        assert len({tuple(row.tolist()) for row in mask}) > 1  # each sample draws its own mask
    with pytest.raises(ValueError, match="mask_ratio"):
        MaskedAutoencoderViT.random_masking(x, 1.0)


def test_loss_counts_only_the_removed_patches():
    model = tiny(norm_pix_loss=False)
    imgs = images()
    loss, pred, mask = model(imgs, generator=seeded())
    manual = (((pred - model.patchify(imgs)) ** 2).mean(-1) * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, manual)
    visible, removed = (mask[0] == 0).nonzero()[0, 0].item(), (mask[0] == 1).nonzero()[0, 0].item()
    for n, changes in ((visible, False), (removed, True)):
        patches = model.patchify(imgs)
        patches[0, n] += 5.0
        other = model.forward_loss(model.unpatchify(patches), pred, mask)
        assert (other != loss).item() is changes


def test_norm_pix_loss_normalises_each_target_patch():
    imgs = images()
    for norm_pix in (True, False):
        model = tiny(norm_pix_loss=norm_pix)
        _, pred, mask = model(imgs, generator=seeded())
        target = model.patchify(imgs)
        if norm_pix:
            target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6).sqrt()
        manual = (((pred - target) ** 2).mean(-1) * mask).sum() / mask.sum()
        torch.testing.assert_close(model.forward_loss(imgs, pred, mask), manual)
        affine = model.forward_loss(3 * imgs + 2, pred, mask)  # brightness and contrast of every patch change
        assert torch.allclose(affine, manual, rtol=1e-4) is norm_pix


# ---------------------------------------------------------------------- U-Net skips


def test_unet_skips_fuse_every_other_encoder_state_deepest_first():
    for depth, sources in ((4, (4, 2)), (5, (5, 3, 1)), (12, (12, 10, 8, 6, 4, 2))):
        model = tiny(depth=depth, decoder_depth=len(sources))
        assert model.skip_sources == sources and len(model.fusions) == len(sources)
        assert model.decoder_embed.in_features == TINY["decoder_embed_dim"] and not hasattr(model, "mask_token")
        fusion = model.fusions[0]
        assert fusion.fc1.in_features == TINY["embed_dim"] + TINY["decoder_embed_dim"]
        assert isinstance(fusion.act, torch.nn.SiLU) and not fusion.fc2.weight.any()
    plain = tiny(depth=4, unet_skips=False)
    assert plain.skip_sources == (4,) and len(plain.fusions) == 0 and not hasattr(plain, "decoder_cls_token")
    assert plain.decoder_embed.in_features == TINY["embed_dim"] and plain.mask_token.shape == (1, 1, 16)
    with pytest.raises(ValueError, match="decoder_depth"):
        tiny(depth=4, decoder_depth=1)
    model = tiny(depth=4, decoder_depth=2, zero_init=False)
    with capture(model, points=("output",)) as record:
        features, _, _ = model.forward_encoder(images(), 0.75, seeded())
    assert [f.shape for f in features] == [(2, 2, 16)] * 2  # cls + 1 visible patch (round(4 · 0.25))
    torch.testing.assert_close(features[0], record["blocks.3.output"])  # h_4 first, raw as the released code
    torch.testing.assert_close(features[1], record["blocks.1.output"])  # then h_2
    normed = tiny(depth=4, decoder_depth=2, zero_init=False, final_norm=True)  # the ablation: MAE's final norm
    assert isinstance(normed.norm, torch.nn.LayerNorm) and isinstance(plain.norm, torch.nn.LayerNorm)
    with capture(normed, points=("output",)) as record:
        features, _, _ = normed.forward_encoder(images(), 0.75, seeded())
    torch.testing.assert_close(features[0], normed.norm(record["blocks.3.output"]))


def test_decoder_pred_starts_at_zero_as_in_the_released_code():
    model = tiny(depth=2, decoder_depth=1)
    assert not model.decoder_pred.weight.any() and not model.decoder_pred.bias.any()
    assert not model.forward_decoder(*model.forward_encoder(images(), 0.75, seeded())[::2]).any()
    assert tiny(depth=2, decoder_depth=1, zero_init=False).decoder_pred.weight.abs().sum() > 0  # Xavier then


@pytest.mark.parametrize("unet", [True, False])
def test_every_parameter_takes_part_in_the_loss(unet):
    """No parameter left without a gradient: DDP then needs no find_unused_parameters."""
    model = tiny(depth=3, unet_skips=unet)
    model(images())[0].backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_without_skips_the_decoder_reads_only_the_encoder_output():
    """Blocks 1 and 2 output zeros, so h_3 is the same for every image: only a skip from h_1 can tell them apart."""
    a, b = images(seed=1), images(seed=2)
    for unet in (True, False):
        model = tiny(depth=3, decoder_depth=2, unet_skips=unet)
        for block in model.blocks[1:]:
            block.forward = torch.zeros_like
        for layer in [fusion.fc2 for fusion in model.fusions] + [model.decoder_pred]:
            torch.nn.init.normal_(layer.weight)  # trained: a fusion reads its skip, the head predicts pixels
        _, pred_a, _ = model(a, generator=seeded())
        _, pred_b, _ = model(b, generator=seeded())
        assert torch.allclose(pred_a, pred_b) is not unet


def test_with_skips_an_untrained_model_predicts_from_position_embeddings_alone():
    """The zero-initialised fusions add nothing, and the decoder stream starts from position embeddings."""
    model = tiny(depth=4, decoder_depth=2)
    torch.nn.init.normal_(model.decoder_pred.weight)  # else every prediction is the zero patch, trivially equal
    _, pred_a, _ = model(images(seed=1), generator=seeded(0))
    _, pred_b, _ = model(images(seed=2), generator=seeded(1))
    torch.testing.assert_close(pred_a, pred_b, rtol=0, atol=0)
    x = model.decoder_embed(torch.cat([model.decoder_cls_token, model.decoder_pos_embed[:, 1:]], 1))
    for block in model.decoder_blocks:
        x = block(x)
    torch.testing.assert_close(pred_a[:1], model.decoder_pred(model.decoder_norm(x))[:, 1:])
    plain = tiny(depth=4, unet_skips=False)  # MAE's decoder reads the encoder output from the start
    torch.nn.init.normal_(plain.decoder_pred.weight)  # a head that is not zero shows what the decoder read
    _, plain_a, _ = plain(images(seed=1), generator=seeded())
    assert not torch.allclose(plain_a, plain(images(seed=2), generator=seeded())[1])


# ---------------------------------------------------------------------- attention paths, analysis surface


def test_fused_and_plain_attention_agree():
    model = tiny(zero_init=False, depth=3, decoder_depth=2)
    imgs = images()
    outputs = {}
    for fused in (True, False):
        assert set_fused(model, fused) == 5  # 3 encoder + 2 decoder blocks
        loss, pred, _ = model(imgs, generator=seeded())
        outputs[fused] = (loss, pred, model.forward_features(imgs))
    for got, want in zip(outputs[True], outputs[False], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_eval_mode_takes_the_plain_path_where_jvp_passes():
    model = tiny(zero_init=False).double()
    set_fused(model, True)
    x, t = images().double(), torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with eval_mode(model):
        assert not any(m.fused_attn for m in model.modules() if hasattr(m, "fused_attn"))
        _, tangent = jvp(model.forward_features, (x,), (t,))
        eps = 1e-6
        central = (model.forward_features(x + eps * t) - model.forward_features(x - eps * t)) / (2 * eps)
    torch.testing.assert_close(tangent, central, rtol=1e-5, atol=1e-7)
    assert all(m.fused_attn for m in model.modules() if hasattr(m, "fused_attn"))


def test_residual_jacobian_is_the_block_jacobian_without_its_skip():
    model = tiny(zero_init=False, shortcut="scaled_both").double()  # α = 0.5, β = √0.5: both conventions matter
    x = images(1).double()
    J = residual_jacobians(model, x[0])  # [L, 80, 80]
    with eval_mode(model):
        states = model.forward_intermediates(x, intermediates_only=True)
        for i, block in enumerate(model.blocks):
            full = torch.autograd.functional.jacobian(block, states[i]).reshape(80, 80)
            torch.testing.assert_close(J[i], full - block.alpha * torch.eye(80, dtype=torch.float64))


def test_alignment_stats_run_on_the_encoder_dense_and_matrix_free():
    model = tiny(zero_init=False, depth=3, alpha_min=0.5, decoder_depth=2)
    x = images(2)
    dense = alignment_stats(model, x, k=3, baseline_trials=2)
    operator = alignment_stats(model, x, k=3, baseline_trials=2, dense_max_dim=10)  # jvp / vjp operators
    assert dense["sigma"].shape == (2, 3, 3) and torch.isfinite(dense["sigma"]).all()
    torch.testing.assert_close(dense["scores"].diagonal(dim1=1, dim2=2), torch.ones(2, 3))
    torch.testing.assert_close(operator["sigma"], dense["sigma"], rtol=2e-3, atol=1e-5)


def test_forward_intermediates_and_features():
    model = tiny(zero_init=False)
    x = images(3)
    states = model.forward_intermediates(x, intermediates_only=True)
    assert [s.shape for s in states] == [(3, 5, 16)] * 3
    h0 = torch.cat([(model.cls_token + model.pos_embed[:, :1]).expand(3, -1, -1),
                    model.patch_embed(x) + model.pos_embed[:, 1:]], dim=1)
    torch.testing.assert_close(states[0], h0)
    features = model.forward_features(x)
    torch.testing.assert_close(features, model.norm(states[-1])[:, 0])  # cls token after the final norm
    pooled, again = model.forward_intermediates(x)
    torch.testing.assert_close(pooled, features)
    torch.testing.assert_close(again[-1], states[-1])
    with capture(model) as record:
        model.forward_features(x)
    torch.testing.assert_close(record.stack("input"), torch.stack(states[:-1]))
    assert [n for n, _ in model.iter_blocks()] == ["blocks.0", "blocks.1"]
    latent = model.forward_encoder(x, 0.0, seeded())[0][0]  # all patches kept, in shuffled order
    torch.testing.assert_close(latent[:, 0], features, rtol=0, atol=1e-5)
    avg = tiny(zero_init=False, global_pool="avg")
    torch.testing.assert_close(avg.forward_features(x), avg.norm(states[-1]).mean(dim=1))


def test_reconstruct_pastes_the_prediction_into_the_removed_patches():
    imgs = images()
    for norm_pix in (False, True):
        model = tiny(norm_pix_loss=norm_pix)
        _, pred, mask = model(imgs, generator=seeded())
        out, mask_again = model.reconstruct(imgs, generator=seeded(), return_mask=True)
        torch.testing.assert_close(mask_again, mask)
        assert out.shape == imgs.shape
        patches, target = model.patchify(out), model.patchify(imgs)
        keep = mask == 0
        torch.testing.assert_close(patches[keep], target[keep], rtol=0, atol=0)
        if norm_pix:
            pred = pred * (target.var(-1, keepdim=True) + 1e-6).sqrt() + target.mean(-1, keepdim=True)
        torch.testing.assert_close(patches[~keep], pred[~keep])


def test_a_few_adam_steps_lower_the_loss():
    torch.manual_seed(0)
    model = MaskedAutoencoderViT(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2,
                                 decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2, norm_pix_loss=False)
    imgs = torch.rand(8, 3, 32, 32, generator=seeded(1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(15):
        loss, _, _ = model(imgs, generator=seeded(2))  # one fixed mask: the loss is a function of the weights
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


# ---------------------------------------------------------------------- registry

KNOBS = ("img_size", "in_chans", "embed_dim", "depth", "num_heads", "decoder_embed_dim", "decoder_depth",
         "decoder_num_heads", "mlp_ratio", "mask_ratio", "norm_pix_loss", "shortcut", "alpha_min", "unet_skips",
         "zero_init")
SIZES = {"mae_vit_tiny_patch16": (224, 192, 3, 512), "mae_vit_small_patch16": (224, 384, 6, 512),
         "mae_vit_base_patch16": (224, 768, 12, 512), "mae_vit_tiny_patch4_32": (32, 192, 3, 128)}


def test_every_size_is_registered():
    assert set(list_models("mae_*")) == set(SIZES)


@pytest.mark.parametrize("name", list_models("mae_*"))
def test_registered_sizes_build_at_test_size_and_expose_their_knobs(name):
    params, takes_any = model_parameters(name)
    assert not takes_any and set(KNOBS) <= set(params) and "num_classes" not in params and "patch_size" not in params
    img, dim, heads, dec = SIZES[name]
    assert (params["img_size"].default, params["embed_dim"].default, params["num_heads"].default) == (img, dim, heads)
    assert params["depth"].default == 12 and params["decoder_embed_dim"].default == dec
    assert (params["shortcut"].default, params["alpha_min"].default) == ("sublayer", 1.0)
    assert params["unet_skips"].default is True and params["zero_init"].default is True
    patch = 4 if name.endswith("_32") else 16
    model = create_model(name, seed=0, img_size=2 * patch, depth=2, embed_dim=16, num_heads=2, decoder_embed_dim=8,
                         decoder_depth=1, decoder_num_heads=2, alpha_min=0.5)
    assert model.patch_size == patch and model.num_patches == 4
    loss, pred, mask = model(torch.randn(2, 3, 2 * patch, 2 * patch))
    assert torch.isfinite(loss) and pred.shape == (2, 4, patch * patch * 3) and mask.sum().item() == 6


def test_create_model_through_the_registry():
    model = create_model("mae_vit_tiny_patch4_32", seed=0, depth=2, embed_dim=32, num_heads=2, in_chans=1,
                         decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2, alpha_min=0.6)
    assert isinstance(model, MaskedAutoencoderViT) and model.grid_size == (8, 8)
    assert [b.alpha_mlp for b in model.blocks][-1] == pytest.approx(0.6)
    assert model.forward_features(torch.randn(2, 1, 32, 32)).shape == (2, 32)
    again = create_model("mae_vit_tiny_patch4_32", seed=0, depth=2, embed_dim=32, num_heads=2, in_chans=1,
                         decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2, alpha_min=0.6)
    for p, q in zip(model.parameters(), again.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    with pytest.raises(TypeError):
        create_model("mae_vit_tiny_patch4_32", num_classes=10)


def test_vit_base_encoder_has_timms_vit_b_parameter_count():
    """Built on the meta device: the shapes without the memory or the init time."""
    with torch.device("meta"):
        model = create_model("mae_vit_base_patch16", final_norm=True)  # timm's ViT ends in a LayerNorm
        vit = timm.create_model("vit_base_patch16_224", num_classes=0)
    encoder = sum(p.numel() for n, p in model.named_parameters()
                  if n.split(".")[0] in ("patch_embed", "cls_token", "blocks", "norm"))
    assert encoder == sum(p.numel() for p in vit.parameters()) - vit.pos_embed.numel()  # ours is a fixed buffer
    assert model.pos_embed.shape == (1, 197, 768) and len(model.decoder_blocks) == 8 and len(model.fusions) == 6
    assert inspect.signature(type(model)).parameters["mask_ratio"].default == 0.75


@pytest.mark.gpu
def test_fused_and_plain_attention_agree_on_cuda():
    model = tiny(zero_init=False, depth=3, decoder_depth=2).cuda()
    imgs = images().cuda()
    outputs = []
    for fused in (True, False):
        set_fused(model, fused)
        outputs.append(model(imgs, generator=torch.Generator("cuda").manual_seed(0))[1])
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-4, atol=1e-4)
