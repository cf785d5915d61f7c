"""The model surface every registered model gives the trainers and analyses, with timm's meaning of
``forward_intermediates``: ``(final features, [h_0, …, h_L])``, ``forward_head(features)`` the logits of
``forward(x)``, ``iter_blocks`` in forward order, and ``no_weight_decay()`` naming parameters."""

import pytest
import torch

from lab.nn.registry import create_model, list_models
from lab.train.optim import decayed

SMALL_MLP = {"depth": 3, "width": 8, "num_classes": 3}
SMALL_CONV = {"depths": (2, 1), "channels": (4, 8), "in_chans": 3, "feature_size": 8, "num_classes": 3}
SMALL_MAE = {"img_size": 16, "embed_dim": 16, "depth": 3, "num_heads": 2, "decoder_embed_dim": 8,
             "decoder_depth": 2, "decoder_num_heads": 2}
SMALL_TIMM = {"num_classes": 3}

# name -> (builder arguments, input shape, blocks L, state shapes [h_0, ..., h_L] without the batch axis)
MODELS = {
    "residual_mlp": ({**SMALL_MLP, "in_dim": 2}, (2,), 3, [(8,)] * 4),
    "fc_resnet": ({**SMALL_MLP, "in_dim": 12}, (12,), 3, [(8,)] * 4),
    "ra_type1": ({**SMALL_MLP, "in_dim": 12}, (3, 2, 2), 3, [(8,)] * 4),
    "ra_type4a": ({**SMALL_MLP, "in_dim": 12}, (12,), 3, [(8,)] * 4),
    "ra_type4b": ({**SMALL_MLP, "in_dim": 12}, (12,), 3, [(8,)] * 4),
    **{name: (SMALL_CONV, (3, 16, 16), 3, [(4, 8, 8)] * 2 + [(8, 4, 4)] * 2)
       for name in ("conv_resnet", "ra_type2", "ra_type3", "ra_type5a", "ra_type5b")},
    **{name: (SMALL_MAE, (3, 16, 16), 3, None) for name in list_models("mae_*")},
    "timm_resnet": ({**SMALL_TIMM, "arch": "resnet18"}, (3, 32, 32), 8, None),
    "timm_resnet18": (SMALL_TIMM, (3, 32, 32), 8, None),
    "timm_resnet34": (SMALL_TIMM, (3, 32, 32), 16, None),
    "timm_resnet50": (SMALL_TIMM, (3, 32, 32), 16, None),
    "timm_resnet50d": (SMALL_TIMM, (3, 32, 32), 16, None),
}


# diffusion models take a noise level with their input; their surface is tested in tests/nn/test_diffusion.py
DIFFUSION = ("uvit_mid", "uvit_small", "uvit_tiny")


def test_every_registered_model_is_covered():
    assert sorted([*MODELS, *DIFFUSION]) == list_models()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_surface(name):
    kwargs, in_shape, depth, shapes = MODELS[name]
    model = create_model(name, seed=0, **kwargs).eval()
    x = torch.randn(2, *in_shape)
    with torch.no_grad():
        features, states = model.forward_intermediates(x)
        assert isinstance(states, list) and len(states) == depth + 1
        if shapes is not None:
            assert [tuple(s.shape[1:]) for s in states] == shapes
        assert all(s.shape[0] == 2 for s in states)
        assert torch.allclose(features, model.forward_features(x), atol=1e-6)
        only = model.forward_intermediates(x, intermediates_only=True)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(only, states, strict=True))
        picked = model.forward_intermediates(x, indices=[0, -1], intermediates_only=True, stop_early=True)
        assert len(picked) == 2 and torch.allclose(picked[0], states[0]) and torch.allclose(picked[1], states[-1])
        last_two = model.forward_intermediates(x, indices=2, intermediates_only=True)
        assert all(torch.allclose(a, b) for a, b in zip(last_two, states[-2:], strict=True))
        if name.startswith("mae_"):  # no classifier: its forward is the masked-reconstruction loss
            assert not hasattr(model, "forward_head") and features.shape == (2, kwargs["embed_dim"])
        else:
            logits = model.forward_head(features)
            assert logits.shape == (2, 3)
            assert torch.allclose(logits, model(x), atol=1e-5)
    assert [n for n, _ in model.iter_blocks()] == [f"blocks.{i}" for i in range(depth)]
    names = dict(model.named_parameters())
    exempt = model.no_weight_decay()
    assert exempt <= names.keys()
    rule = decayed(model)
    assert not any(rule[n] for n in exempt)
    assert not any(rule[n] for n, p in names.items() if p.ndim <= 1 or n.endswith(".bias"))
    assert any(rule.values())


def test_mae_intermediates_as_a_patch_grid_after_the_final_norm():
    model = create_model("mae_vit_tiny_patch4_32", seed=0, **SMALL_MAE).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        tokens = model.forward_intermediates(x, intermediates_only=True)  # [B, 1+N, D], cls first
        grids = model.forward_intermediates(x, norm=True, output_fmt="NCHW", intermediates_only=True)
    assert tokens[0].shape == (2, 1 + 16, 16) and grids[0].shape == (2, 16, 4, 4)
    for h, grid in zip(tokens, grids, strict=True):
        torch.testing.assert_close(grid[:, :, 1, 2], model.norm(h)[:, 1 + 1 * 4 + 2])
    with pytest.raises(ValueError, match="output_fmt must be one of NLC, NCHW"):
        model.forward_intermediates(x, output_fmt="NHWC")


@pytest.mark.parametrize("indices", [None, 1, 3, 5, [0], [-1], [0, 2, -1], (4, 1)])
def test_take_indices_is_timms_rule(indices):
    from timm.models._features import feature_take_indices

    from lab.nn.intermediates import take_indices

    assert take_indices(5, indices) == feature_take_indices(5, indices)


@pytest.mark.parametrize("indices", [0, 6, [5], [-6]])
def test_take_indices_refuses_what_timm_refuses(indices):
    from timm.models._features import feature_take_indices

    from lab.nn.intermediates import take_indices

    with pytest.raises(AssertionError) as ours:
        take_indices(5, indices)
    with pytest.raises(AssertionError) as timms:
        feature_take_indices(5, indices)
    assert str(ours.value) == str(timms.value)
