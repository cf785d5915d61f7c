"""The model surface every registered model gives the trainers and analyses, with timm's meaning of
``forward_intermediates``: ``(final features, [h_0, …, h_L])``, ``forward_head(features)`` the logits of
``forward(x)``, ``iter_blocks`` in forward order, and ``no_weight_decay()`` naming parameters."""

import pytest
import torch

from lab.nn.registry import MODEL_TASKS, create_model, list_models, model_info
from lab.train.optim import decayed

# every registered model but the diffusion ones, which take a noise level with their input (their surface is tested
# in tests/nn/test_diffusion.py); each is built from its registered example, as timm's tests build every model from
# its default configuration
SURFACE = [name for name in list_models() if model_info(name).task != "diffusion"]
# the state shapes [h_0, ..., h_L] (without the batch axis) of the examples whose shapes the tests pin
SHAPES = {
    "residual_mlp": [(8,)] * 4, **{name: [(8,)] * 4 for name in ("fc_resnet", "ra_type1", "ra_type4a", "ra_type4b")},
    **{name: [(4, 8, 8)] * 2 + [(8, 4, 4)] * 2
       for name in ("conv_resnet", "ra_type2", "ra_type3", "ra_type5a", "ra_type5b")},
}


def test_every_registered_model_has_an_example_that_builds_and_a_known_task():
    assert len(SURFACE) >= 19 and {model_info(n).task for n in list_models()} == set(MODEL_TASKS)
    for name in list_models():
        info = model_info(name)
        assert info.input_shape and info.family, name
        create_model(name, seed=0, **info.example)  # the example is valid for the builder


@pytest.mark.parametrize("name", SURFACE)
def test_model_surface(name):
    info = model_info(name)
    model = create_model(name, seed=0, **info.example).eval()
    depth, shapes = len(list(model.iter_blocks())), SHAPES.get(name)
    assert depth >= 1
    x = torch.randn(2, *info.input_shape)
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
        if info.task == "mae":  # no classifier: its forward is the masked-reconstruction loss
            assert not hasattr(model, "forward_head") and features.shape == (2, info.example["embed_dim"])
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
    model = create_model("mae_vit_tiny_patch4_32", seed=0, **model_info("mae_vit_tiny_patch4_32").example).eval()
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


def test_last_state_lets_each_state_go_before_the_next_is_computed():
    import weakref

    from lab.nn.intermediates import last_state

    refs: list[weakref.ref] = []

    def stream():
        for i in range(4):
            assert all(ref() is None for ref in refs[:-1]), "an earlier state is still held"
            state = torch.full((2,), float(i))
            refs.append(weakref.ref(state))
            yield state
            del state

    assert last_state(stream()).tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="no state"):
        last_state(iter(()))
