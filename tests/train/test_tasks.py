"""The residual MLP's generative tasks: what each draws, the loss it scores, and which configs may use them."""

import pytest
import torch

from lab.config import ConfigError, ExperimentConfig, apply_overrides
from lab.seeds import step_seed
from lab.train.runner import make_trainer
from lab.train.tasks import PROBE_T, T_MIN, TIME_DIM, PixelTask


def digits(**overrides) -> ExperimentConfig:
    base = {"data.name": "digits", "model.depth": 4, "model.width": 16, "train.batch_size": 64,
            "train.max_steps": 40, "train.eval_every": 20}
    return apply_overrides(ExperimentConfig(), {**base, **overrides})


def test_masked_hides_the_ratio_of_each_images_pixels_and_scores_only_those():
    task = PixelTask("masked", 64, mask_ratio=0.25)
    x = torch.randn(5, 1, 8, 8)
    inputs, target, mask = task.step_draw(x, seed=3, step=7)
    flat = x.flatten(1)
    assert inputs.shape == (5, 128) and torch.equal(target, flat)
    assert mask.sum(1).tolist() == [16.0] * 5  # round(0.25 · 64) hidden per image, each image its own
    assert not torch.equal(mask[0], mask[1])
    assert torch.equal(inputs[:, :64], flat * (1 - mask)) and torch.equal(inputs[:, 64:], mask)
    output = torch.randn(5, 64)
    expected = ((output - flat) ** 2)[mask.bool()].mean()  # MAE's loss: the hidden pixels only
    assert task.loss(output, target, mask).item() == pytest.approx(expected.item(), rel=1e-6)
    assert torch.equal(task.probe_inputs(x), torch.cat([flat, torch.zeros_like(flat)], 1))  # nothing hidden


def test_denoise_noises_on_the_vp_sde_and_embeds_the_noise_level():
    task = PixelTask("denoise", 64)
    x = torch.randn(6, 1, 8, 8)
    inputs, noise, weight = task.step_draw(x, seed=0, step=3)
    assert inputs.shape == (6, 64 + TIME_DIM) and torch.equal(weight, torch.ones(6, 64))
    # the same draws made by hand: t ~ U(t₀, 1), then ε; x_t = √ᾱ x + √(1 − ᾱ) ε, ᾱ = exp(−(β₀ t + ½ (β₁ − β₀) t²))
    g = torch.Generator().manual_seed(step_seed(0, 3))
    t = T_MIN + (1 - T_MIN) * torch.rand(6, generator=g)
    assert torch.equal(noise, torch.randn(6, 64, generator=g))
    alpha_bar = torch.exp(-(0.1 * t + 0.5 * (20.0 - 0.1) * t**2))[:, None]
    assert torch.allclose(inputs[:, :64], alpha_bar.sqrt() * x.flatten(1) + (1 - alpha_bar).sqrt() * noise,
                          atol=1e-6)
    # the U-ViT's embedding of 999 t: cosines of 999 t · 10000^(−k/8), then the sines
    freqs = 10000.0 ** (-torch.arange(TIME_DIM // 2) / (TIME_DIM // 2))
    angles = 999 * t[:, None] * freqs
    assert torch.allclose(inputs[:, 64:], torch.cat([angles.cos(), angles.sin()], 1), atol=1e-4)
    # the probe reads images noised to t = PROBE_T, a level inside the training range, with one fixed noise draw
    probe = task.probe_inputs(x)
    angles = 999 * PROBE_T * freqs
    assert torch.allclose(probe[:, 64:], torch.cat([angles.cos(), angles.sin()]).expand(6, -1), atol=1e-4)
    alpha_bar = torch.exp(torch.tensor(-(0.1 * PROBE_T + 0.5 * (20.0 - 0.1) * PROBE_T**2)))
    residual = (probe[:, :64] - alpha_bar.sqrt() * x.flatten(1)) / (1 - alpha_bar).sqrt()
    assert torch.equal(probe, task.probe_inputs(x)) and abs(float(residual.std()) - 1) < 0.15  # unit noise


def test_draws_are_a_function_of_seed_and_step_and_evaluations_draw_alike():
    task = PixelTask("denoise", 64)
    x = torch.randn(32, 64)
    a, b, c = task.step_draw(x, 1, 5), task.step_draw(x, 1, 5), task.step_draw(x, 1, 6)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))  # a resumed run redraws step 5 exactly
    assert not torch.equal(a[1], c[1]) and not torch.equal(a[1], task.step_draw(x, 2, 5)[1])
    assert all(torch.equal(p, q) for p, q in zip(task.eval_draw(x), task.eval_draw(x), strict=True))


@pytest.mark.parametrize("task", ["masked", "denoise"])
def test_a_run_learns_its_task_and_records_losses_and_the_probe(task):
    trainer = make_trainer(digits(**{"train.task": task}))
    before = trainer.evaluate()
    trainer.fit()
    after = trainer.last_eval
    assert after.keys() == {"train_loss", "test_loss", "probe_acc", "probe_few"}
    assert after["test_loss"] < 0.8 * before["test_loss"]
    assert 0.1 < after["probe_acc"] <= 1.0 and 0.1 < after["probe_few"] <= after["probe_acc"]  # above chance


@pytest.mark.parametrize("overrides, message", [
    ({"data.name": "spiral"}, "on an image set"),
    ({"model.name": "fc_resnet"}, "model.name=residual_mlp"),
    ({"train.engine": "loader"}, "tensor engine"),
    ({"train.mask_ratio": 0.001}, "must hide at least one"),
])
def test_configs_a_task_cannot_train_are_refused(overrides, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        make_trainer(digits(**{"train.task": "masked", **overrides}))
