"""The discrete schedule of U-ViT's latent models: its ᾱ is the reference's ``stable_diffusion_beta_schedule`` with
n counted from 1, its loss draws n from {1, …, N}, and DPM-Solver++ with the exact noise predictor of Gaussian data
lands on the data's distribution while feeding the network N t at integer steps."""

import numpy as np
import pytest
import torch

from lab.nn.discrete_schedule import DiscreteSchedule

SIGMA = 0.5  # data: N(0, σ² I)


def _reference_cum_alphas() -> np.ndarray:
    """The reference's ``Schedule``: betas with a 0 prepended (n = 0 is the data), then ᾱ_n = ∏_{i ≤ n} (1 − β_i)."""
    betas = np.linspace(0.00085**0.5, 0.0120**0.5, 1000, dtype=np.float64) ** 2  # stable_diffusion_beta_schedule
    return np.cumprod(1.0 - np.append(0.0, betas))


def _exact_eps(schedule: DiscreteSchedule, sigma: float = SIGMA, times: list | None = None):
    """E[ε | x_n] for data N(0, σ² I): x_n ~ N(0, ᾱσ² + 1 − ᾱ), so ε̂ = √(1 − ᾱ) x_n / (ᾱσ² + 1 − ᾱ)."""
    def eps(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if times is not None:
            times.append(schedule.net_time(t)[0].item())
        a = schedule.cum_alpha(t.double())
        return ((1 - a).sqrt() / (a * sigma**2 + 1 - a)).float()[:, None] * x
    return eps


def test_cum_alpha_is_the_references_counted_from_one():
    s = DiscreteSchedule()
    n = torch.arange(1, 1001)
    np.testing.assert_allclose(s.cum_alpha(n.double() / 1000).numpy(), _reference_cum_alphas()[1:], rtol=1e-6)
    assert s.step_of(torch.tensor([0.0, 0.0004, 0.5, 1.0])).tolist() == [1, 1, 500, 1000]
    with pytest.raises(ValueError, match="beta_start < beta_end"):
        DiscreteSchedule(beta_start=0.02, beta_end=0.01)


def test_the_loss_draws_n_from_one_to_n_and_noises_with_the_reference_formula():
    s, x0 = DiscreteSchedule(), torch.randn(5, 3, 2, 2)
    seen = []

    def eps_fn(xt, t):
        seen.append((xt, t))
        return torch.zeros_like(xt)

    per_sample = s.loss(eps_fn, x0, generator=torch.Generator().manual_seed(4))
    g = torch.Generator().manual_seed(4)  # the same draws, in the same order
    n = torch.randint(1, 1001, (5,), generator=g)
    noise = torch.randn(x0.shape, generator=g)
    a = torch.from_numpy(_reference_cum_alphas()[n.numpy()]).float()[:, None, None, None]
    xt, t = seen[0]
    torch.testing.assert_close(t * 1000, n.float())
    torch.testing.assert_close(xt, a.sqrt() * x0 + (1 - a).sqrt() * noise)
    torch.testing.assert_close(per_sample, noise.pow(2).flatten(1).mean(1))  # ε̂ = 0: the loss is E ε²


def test_dpm_solver_with_the_exact_noise_samples_the_data_and_feeds_the_network_integer_steps():
    s, times = DiscreteSchedule(), []
    x_init = torch.randn(4000, 8, generator=torch.Generator().manual_seed(0))
    x = s.sample(_exact_eps(s, times=times), x_init, 200)
    # it ends at n = 1, where x₁ ~ N(0, ᾱ₁σ² + 1 − ᾱ₁): σ to within the solver's error at 200 steps (0.3 %; 1.8 % at
    # the reference's 50, from the long last steps of an even grid) and the sampling error of 32,000 values
    a1 = _reference_cum_alphas()[1]
    assert x.std().item() == pytest.approx((a1 * SIGMA**2 + 1 - a1) ** 0.5, rel=0.01)
    assert abs(x.mean().item()) < 0.02
    assert len(times) == 200 and times[0] == 1000.0 and all(t == round(t) and 1 <= t <= 1000 for t in times)
    assert torch.equal(s.sample(_exact_eps(s), x_init, 200), x)  # deterministic given the noise
    with pytest.raises(ValueError, match="valid: dpm_solver"):
        s.sample(_exact_eps(s), x_init, 20, sampler="ode")
