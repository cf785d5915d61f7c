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


def test_the_toy_mae_has_a_decayed_encoder_a_decoder_at_alpha_one_and_mirrored_skips():
    from lab.nn.mlp import skip_sources

    # every other encoder state from the last, h_L (the decoder's stream itself), h_{L-2}, ..., h_2, as the paper's
    # MAE; never the stem's output h_0, through which the decoder could bypass the encoder
    assert skip_sources(8, 4) == {9: 6, 10: 4, 11: 2}
    assert skip_sources(4, 4) == {5: 2} and skip_sources(5, 3) == {6: 3, 7: 1} and skip_sources(8, 2) == {9: 6}
    with pytest.raises(ValueError, match="decoder_depth"):
        skip_sources(2, 3)
    model = ResidualMLP(depth=4, width=6, in_dim=5, num_classes=5, shortcut="linear", alpha_min=0.5,
                        decoder_depth=3, unet_skips=True)
    assert model.skips == {5: 2}
    assert [b.alpha for b in model.blocks] == pytest.approx([1.0, 5 / 6, 2 / 3, 0.5, 1.0, 1.0, 1.0])
    assert model.depth == 7 and model.representation == 4
    x = torch.randn(3, 5)
    states = [model.stem(x)]  # by hand: h + h_s before each decoder block
    for i, block in enumerate(model.blocks):
        h = states[-1] + (states[model.skips[i]] if i in model.skips else 0)
        states.append(block(h))
    assert torch.allclose(model(x), model.head(states[-1]), atol=1e-6)
    assert torch.allclose(model.forward_representation(x), states[4])
    assert all(torch.allclose(a, b) for a, b in zip(model.forward_intermediates(x, intermediates_only=True), states,
                                                      strict=True))
    with pytest.raises(ValueError, match="needs a decoder"):
        ResidualMLP(depth=2, unet_skips=True)


@pytest.mark.parametrize("unet_skips", [False, True])
def test_inference_holds_only_the_states_it_still_needs(unet_skips):
    # without autograd nothing else keeps a block's output alive: holding all L + 1 states made evaluating the
    # 16,384-point spiral allocate fresh memory at every block (1.6x the time)
    import weakref

    model = ResidualMLP(depth=8, width=4, decoder_depth=4 if unet_skips else 0, unet_skips=unet_skips)
    outputs: list[weakref.ref] = []
    alive_before_last: list[int] = []
    for block in model.blocks:
        block.register_forward_hook(lambda module, args, out: outputs.append(weakref.ref(out)))
    model.blocks[-1].register_forward_pre_hook(
        lambda module, args: alive_before_last.append(sum(ref() is not None for ref in outputs)))
    with torch.no_grad():
        model(torch.randn(5, 2))
    held = {s - 1 for s in model.skips.values() if s > 0}  # block outputs a later skip still reads
    # the last block's input (h_{L-1}), plus, with skips, the encoder states still to be added
    assert alive_before_last == [1 + len(held - {len(model.blocks) - 2})]
