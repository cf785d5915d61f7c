import pytest
import torch

import lab
from lab.nn import ResidualMLP, create_model, list_models
from lab.shortcuts import alphas


@pytest.mark.parametrize("depth", [1, 2, 32, 64])
@pytest.mark.parametrize("width", [1, 32])
def test_shapes(depth, width):
    model = create_model("residual_mlp", depth=depth, width=width)
    x = torch.randn(7, 2)
    assert model(x).shape == (7, 2)
    assert model.forward_features(x).shape == (7, width)
    features, states = model.forward_intermediates(x)
    assert len(states) == depth + 1 and all(s.shape == (7, width) for s in states)
    assert torch.equal(model.forward_head(features), model(x))
    assert torch.equal(states[-1], model.forward_features(x)) and torch.equal(features, states[-1])
    assert [n for n, _ in model.iter_blocks()] == [f"blocks.{i}" for i in range(depth)]


def test_registry():
    assert "residual_mlp" in list_models() and lab.list_models("resid*") == ["residual_mlp"]
    with pytest.raises(ValueError, match="unknown model 'nope'; registered: .*residual_mlp"):
        create_model("nope")


def test_seeded_init_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = create_model("residual_mlp", seed=5, depth=3, width=4)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = create_model("residual_mlp", seed=5, depth=3, width=4)
    c = create_model("residual_mlp", seed=6, depth=3, width=4)
    assert torch.equal(a.stem.weight, b.stem.weight) and not torch.equal(a.stem.weight, c.stem.weight)


def test_block_equation_with_decayed_schedule():
    model = ResidualMLP(depth=4, width=3, shortcut="linear", alpha_min=0.25).eval()
    assert [b.alpha for _, b in model.iter_blocks()] == pytest.approx(alphas("linear", 4, 0.25))
    h = torch.randn(5, 3)
    block = model.blocks[3]
    expected = 0.25 * h + torch.nn.functional.gelu(block.branch.fc(h))
    assert torch.allclose(block(h), expected)


def test_no_shortcut_and_table3b_controls():
    h = torch.randn(5, 3)
    plain = ResidualMLP(depth=2, width=3, shortcut="none").blocks[0]
    assert torch.allclose(plain(h), plain.branch(h))
    both = ResidualMLP(depth=2, width=3, shortcut="scaled_both").blocks[0]
    assert torch.allclose(both(h), 0.5**0.5 * (h + both.branch(h)))
    branch = ResidualMLP(depth=2, width=3, shortcut="scaled_branch").blocks[0]
    assert torch.allclose(branch(h), h + 0.5**0.5 * branch.branch(h))


def test_zero_init_makes_blocks_start_as_their_shortcut_but_still_learn():
    model = ResidualMLP(depth=3, width=4, zero_init=True, shortcut="linear", alpha_min=0.5)
    h = torch.randn(6, 4)
    for block in model.blocks:
        assert torch.allclose(block(h), block.alpha * h)
    loss = model(torch.randn(6, 2)).sum()
    loss.backward()
    assert all(b.branch.fc.weight.grad.abs().sum() > 0 for b in model.blocks)


@pytest.mark.parametrize("activation", ["gelu", "relu", "tanh", "identity"])
def test_activations(activation):
    model = ResidualMLP(depth=2, width=3, activation=activation)
    assert model(torch.randn(2, 2)).shape == (2, 2)
    with pytest.raises(ValueError, match="unknown activation"):
        ResidualMLP(activation="swish")
