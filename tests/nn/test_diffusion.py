"""The diffusion model around U-ViT: its loss is the VP-SDE's on the network at 999 t, labels drop to the null
class at the configured rate, guidance is (1 + w) ε(x, y) − w ε(x, ∅), and samples come from the seeded noise."""

import pytest
import torch

from lab.nn.diffusion import ScoreDiffusion
from lab.nn.discrete_schedule import DiscreteSchedule
from lab.nn.registry import create_model
from lab.nn.uvit import UViT


def _model(**kwargs) -> ScoreDiffusion:
    return create_model("uvit_tiny", seed=0, embed_dim=16, depth=2, num_heads=2, **kwargs)


def test_the_loss_is_the_sdes_on_the_network_at_999_t():
    m = _model(num_classes=0)
    x = torch.randn(6, 1, 8, 8)
    loss, per_sample = m(x, generator=torch.Generator().manual_seed(3))
    expected = m.process.loss(lambda xt, t: m.net(xt, 999 * t), x, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(per_sample, expected)
    assert loss.item() == pytest.approx(expected.mean().item())
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())


def test_labels_drop_to_the_null_class_at_p_uncond_in_training_only():
    m = _model(num_classes=10, p_uncond=0.25)
    assert m.net.null_class == 10 and m.p_uncond == 0.25
    seen = []
    m.net.register_forward_pre_hook(lambda mod, args: seen.append(args[2].clone()))
    y = torch.arange(4000) % 10
    m(torch.zeros(4000, 1, 8, 8), y)
    assert (seen[-1] == 10).float().mean().item() == pytest.approx(0.25, abs=0.02)
    assert torch.equal(seen[-1][seen[-1] != 10], y[seen[-1] != 10])
    m.eval()
    m(torch.zeros(8, 1, 8, 8), y[:8])
    assert torch.equal(seen[-1], y[:8])  # evaluation scores the labels as given
    plain = _model(num_classes=10, p_uncond=0.0)
    assert plain.net.null_class is None and plain.net.label_emb.num_embeddings == 10


def test_guidance_is_the_references_combination_and_needs_a_null_class():
    m = _model(num_classes=10).eval()
    x, t, y = torch.randn(3, 1, 8, 8), torch.tensor([0.1, 0.5, 0.9]), torch.tensor([1, 2, 3])
    cond, uncond = m.net(x, 999 * t, y), m.net(x, 999 * t, torch.full_like(y, 10))
    torch.testing.assert_close(m.noise_pred(x, t, y, guidance=0.4), 1.4 * cond - 0.4 * uncond)
    with pytest.raises(ValueError, match="classifier-free guidance"):
        _model(num_classes=0).noise_pred(x, t, guidance=0.4)


def test_samples_are_a_function_of_the_generator():
    m = _model(num_classes=0).eval()
    a = m.sample(4, steps=3, generator=torch.Generator().manual_seed(7))
    b = m.sample(4, steps=3, generator=torch.Generator().manual_seed(7))
    c = m.sample(4, steps=3, sampler="sde", generator=torch.Generator().manual_seed(8))
    assert a.shape == (4, 1, 8, 8) and torch.equal(a, b) and not torch.equal(a, c)
    assert m.image_shape == (1, 8, 8)


def test_the_stream_is_the_networks_at_999_t_and_weight_decay_spares_position_embeddings():
    m = _model(num_classes=0).eval()
    x, t = torch.randn(2, 1, 8, 8), torch.tensor([0.2, 0.7])
    states = m.forward_intermediates(x, t, intermediates_only=True)
    expected = m.net.forward_intermediates(x, 999 * t, intermediates_only=True)
    assert len(states) == 4 and all(torch.equal(a, b) for a, b in zip(states, expected, strict=True))
    assert [n for n, _ in m.iter_blocks()][0] == "net.in_blocks.0"
    assert m.no_weight_decay() == {"net.pos_embed"} and isinstance(m.net, UViT)


def test_on_the_discrete_schedule_the_network_sees_n_and_samples_with_dpm_solver():
    """The reference's latent models: the network sees the step n = N t; DPM-Solver++ is their only sampler."""
    m = _model(num_classes=0, schedule="discrete")
    assert m.samplers == ("dpm_solver",)
    x = torch.randn(6, 1, 8, 8)
    _, per_sample = m(x, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    expected = m.process.loss(lambda xt, t: m.net(xt, (1000 * t).round()), x, generator=g)
    torch.testing.assert_close(per_sample, expected)
    m.eval()
    a = m.sample(3, steps=4, generator=torch.Generator().manual_seed(1))
    assert a.shape == (3, 1, 8, 8) and torch.equal(a, m.sample(3, steps=4, generator=torch.Generator().manual_seed(1)))
    with pytest.raises(ValueError, match="valid: dpm_solver"):
        m.sample(3, steps=4, sampler="ode")
    with pytest.raises(ValueError, match="unknown schedule"):
        _model(schedule="cosine")
    assert isinstance(create_model("uvit_mid", depth=2, embed_dim=24, num_heads=2).process, DiscreteSchedule)
