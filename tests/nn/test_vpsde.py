"""The VP-SDE: its marginals and reverse step are diffusers' (``ScoreSdeVpScheduler``), and with the exact noise
predictor of Gaussian data its loss and both samplers give the known answers."""

import math

import pytest
import torch

from lab.nn.vpsde import VPSDE, sample

SIGMA = 0.5  # data: N(0, σ² I)


def _exact_eps(sde: VPSDE, sigma: float = SIGMA):
    """E[ε | x_t] for data N(0, σ² I): x_t ~ N(0, ᾱσ² + 1 − ᾱ), so ε̂ = √(1 − ᾱ) x_t / (ᾱσ² + 1 − ᾱ)."""
    def eps(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a, b = sde.cum_alpha(t), sde.cum_beta(t)
        return (b.sqrt() / (a * sigma**2 + b))[:, None] * x
    return eps


def test_marginals_are_diffusers_score_sde_vp():
    from diffusers.schedulers.deprecated.scheduling_sde_vp import ScoreSdeVpScheduler

    ref = ScoreSdeVpScheduler(beta_min=0.1, beta_max=20.0)
    sde, t = VPSDE(), torch.linspace(1e-3, 1, 50, dtype=torch.float64)
    log_mean_coeff = -0.25 * t**2 * (ref.config.beta_max - ref.config.beta_min) - 0.5 * t * ref.config.beta_min
    torch.testing.assert_close(sde.cum_alpha(t).sqrt(), torch.exp(log_mean_coeff))  # diffusers' mean coefficient
    torch.testing.assert_close(sde.cum_beta(t).sqrt(), torch.sqrt(1.0 - torch.exp(2.0 * log_mean_coeff)))


@pytest.mark.parametrize("t", [1.0, 0.5, 0.02])
def test_one_reverse_sde_step_is_diffusers_step_pred(t):
    """diffusers' ``step_pred`` takes the model's ε̂ as its "score" (it divides by −std itself) and steps by
    dt = −1/N; the lab's Euler–Maruyama step from the same state, noise and dt lands on the same point."""
    from diffusers.schedulers.deprecated.scheduling_sde_vp import ScoreSdeVpScheduler

    ref = ScoreSdeVpScheduler(beta_min=0.1, beta_max=20.0)
    ref.set_timesteps(100)
    x, eps = torch.randn(4, 3, 2, 2), torch.randn(4, 3, 2, 2)
    tt = torch.full((4,), t)
    theirs, their_mean = ref.step_pred(eps, x, tt, generator=torch.Generator().manual_seed(1))
    mine, mean = VPSDE().reverse_step(x, tt, -1.0 / 100, eps, ode=False, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(mean, their_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)


def test_perturbation_and_score_formulas():
    sde = VPSDE(0.1, 20.0)
    t = torch.tensor([0.3, 0.9])
    bar = math.exp(-(0.1 * 0.3 + 0.5 * 19.9 * 0.09))
    assert sde.cum_alpha(t)[0].item() == pytest.approx(bar, rel=1e-6)
    assert sde.cum_beta(torch.tensor([1e-9])).item() == pytest.approx(1e-10, rel=1e-3)  # exact near 0
    x0, noise = torch.randn(2, 5), torch.randn(2, 5)
    xt = sde.perturb(x0, t, noise)
    torch.testing.assert_close(xt[0], math.sqrt(bar) * x0[0] + math.sqrt(1 - bar) * noise[0])
    torch.testing.assert_close(sde.score(noise, t)[0], -noise[0] / math.sqrt(1 - bar))
    with pytest.raises(ValueError, match="beta_min < beta_max"):
        VPSDE(1.0, 0.5)


def test_the_loss_of_the_exact_predictor_is_its_expected_value():
    """For Gaussian data the best ε̂ leaves E[(ε − ε̂)²] = ᾱσ² / (ᾱσ² + 1 − ᾱ) at each t: its mean over t ~ U[0, 1)
    is an integral the Monte-Carlo loss must match."""
    sde = VPSDE()
    x0 = SIGMA * torch.randn(40_000, 4, generator=torch.Generator().manual_seed(0))
    loss = sde.loss(_exact_eps(sde), x0, generator=torch.Generator().manual_seed(1)).mean().item()
    t = (torch.arange(100_000, dtype=torch.float64) + 0.5) / 100_000
    a = sde.cum_alpha(t)
    expected = (a * SIGMA**2 / (a * SIGMA**2 + 1 - a)).mean().item()
    assert loss == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize(("sampler", "steps"), [("ode", 100), ("sde", 400)])
def test_both_samplers_reach_the_data_distribution_with_the_exact_score(sampler, steps):
    sde = VPSDE()
    noise = torch.randn(8000, 1, generator=torch.Generator().manual_seed(0))
    x = sample(sde, _exact_eps(sde), noise, steps, sampler=sampler, generator=torch.Generator().manual_seed(1))
    assert x.std().item() == pytest.approx(SIGMA, rel=0.04) and abs(x.mean().item()) < 0.03
    if sampler == "ode":  # deterministic: the probability-flow ODE maps N(0, 1) onto N(0, σ²) by scaling
        torch.testing.assert_close(x, SIGMA * noise, atol=0.03, rtol=0.05)


def test_a_sampler_is_named_and_needs_a_step():
    with pytest.raises(ValueError, match="unknown sampler"):
        sample(VPSDE(), lambda x, t: x, torch.zeros(1, 1), 5, sampler="ddim")
    with pytest.raises(ValueError, match="at least one step"):
        sample(VPSDE(), lambda x, t: x, torch.zeros(1, 1), 0)
