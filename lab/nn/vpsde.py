"""The continuous variance-preserving SDE that U-ViT trains with on pixels, its ε-prediction loss and its samplers.

Song et al. 2021 (*Score-Based Generative Modeling through Stochastic Differential Equations*), as the U-ViT
reference code (``sde.py``) uses it for CIFAR: on t ∈ [0, 1]

    dx = −½ β(t) x dt + √β(t) dw,        β(t) = β₀ + t (β₁ − β₀),  β₀ = 0.1, β₁ = 20,

so x_t = √ᾱ(t) x₀ + √(1 − ᾱ(t)) ε with ᾱ(t) = exp(−∫₀ᵗ β) = exp(−β₀ t − ½ (β₁ − β₀) t²). The network predicts ε
from (x_t, 999 t); the score is ∇ log p_t(x) = −ε̂ / √(1 − ᾱ(t)). Sampling integrates the reverse-time SDE
(Euler–Maruyama) or the probability-flow ODE (Euler) from t = 1 to ε_t = 10⁻³ on an even grid, then takes one
last noiseless step to t = 0 — the reference's ``euler_maruyama``.

One step of the reverse SDE is diffusers' ``ScoreSdeVpScheduler.step_pred`` (a test compares them). That scheduler
is deprecated in diffusers and steps on another grid (N steps of 1/N from 1 to 10⁻³, the last one noisy), so the
sampler is written here, on the reference's grid, whose last step is shorter than the others and noiseless.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["VPSDE", "sample"]

SAMPLERS = ("ode", "sde")

EpsFn = Callable[[Tensor, Tensor], Tensor]  # (x_t [B, ...], t [B]) -> ε̂ [B, ...]


def _per_sample(s: Tensor, x: Tensor) -> Tensor:
    """``s [B]`` shaped to broadcast over ``x [B, ...]``."""
    return s.reshape(-1, *([1] * (x.dim() - 1)))


class VPSDE:
    """The VP-SDE with a linear β(t) (see the module docstring).

    Args:
        beta_min: β₀.
        beta_max: β₁.
    """

    samplers = SAMPLERS

    def __init__(self, beta_min: float = 0.1, beta_max: float = 20.0) -> None:
        if not 0 < beta_min < beta_max:
            raise ValueError(f"the VP-SDE needs 0 < beta_min < beta_max; got {beta_min}, {beta_max}")
        self.beta_min, self.beta_max = float(beta_min), float(beta_max)

    def net_time(self, t: Tensor) -> Tensor:
        """The time the network sees: 999 t (the reference's ``ScoreModel.predict``)."""
        return 999.0 * t

    def beta(self, t: Tensor) -> Tensor:
        """β(t) = β₀ + t (β₁ − β₀), the squared diffusion coefficient g(t)²."""
        return self.beta_min + t * (self.beta_max - self.beta_min)

    def beta_integral(self, t: Tensor) -> Tensor:
        """∫₀ᵗ β = β₀ t + ½ (β₁ − β₀) t²."""
        return self.beta_min * t + 0.5 * (self.beta_max - self.beta_min) * t**2

    def cum_alpha(self, t: Tensor) -> Tensor:
        """ᾱ(t) = exp(−∫₀ᵗ β): the signal's share of the variance of x_t."""
        return torch.exp(-self.beta_integral(t))

    def cum_beta(self, t: Tensor) -> Tensor:
        """1 − ᾱ(t): the noise variance of x_t given x₀ (``-expm1`` keeps it exact near t = 0)."""
        return -torch.expm1(-self.beta_integral(t))

    def perturb(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """x_t = √ᾱ(t) x₀ + √(1 − ᾱ(t)) ε for ``x0 [B, ...]``, ``t [B]``, ``noise`` like ``x0``."""
        return _per_sample(self.cum_alpha(t).sqrt(), x0) * x0 + _per_sample(self.cum_beta(t).sqrt(), x0) * noise

    def score(self, eps: Tensor, t: Tensor) -> Tensor:
        """∇ log p_t from the predicted noise: −ε̂ / √(1 − ᾱ(t))."""
        return -eps / _per_sample(self.cum_beta(t).sqrt(), eps)

    def reverse_drift(self, x: Tensor, t: Tensor, eps: Tensor, *, ode: bool) -> Tensor:
        """f(x, t) − c g(t)² ∇ log p_t(x), with c = 1 for the reverse SDE and ½ for the probability-flow ODE."""
        beta = _per_sample(self.beta(t), x)
        return -0.5 * beta * x - (0.5 if ode else 1.0) * beta * self.score(eps, t)

    def reverse_step(self, x: Tensor, t: Tensor, dt: float, eps: Tensor, *, ode: bool,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """One Euler(–Maruyama) step of the reverse process from ``t [B]`` by ``dt < 0``.

        Returns:
            ``(x, mean)``: the next state, and the state without the step's noise (equal for the ODE).
        """
        mean = x + self.reverse_drift(x, t, eps, ode=ode) * dt
        if ode:
            return mean, mean
        sigma = _per_sample(self.beta(t).sqrt(), x) * (-dt) ** 0.5
        noise = torch.randn(x.shape, device=x.device, dtype=x.dtype, generator=generator)
        return mean + sigma * noise, mean

    def loss(self, eps_fn: EpsFn, x0: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The ε-prediction loss per sample (the reference's ``LSimple``): t ~ U[0, 1), ε ~ N(0, I),
        ``mean((ε − eps_fn(x_t, t))²)`` over each sample's elements → ``[B]``."""
        t = torch.rand(len(x0), device=x0.device, generator=generator)
        noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
        return (noise - eps_fn(self.perturb(x0, t, noise), t)).pow(2).flatten(1).mean(1)

    def sample(self, eps_fn: EpsFn, x_init: Tensor, steps: int, *, sampler: str = "ode",
               generator: torch.Generator | None = None) -> Tensor:
        """:func:`sample` on this SDE."""
        return sample(self, eps_fn, x_init, steps, sampler=sampler, generator=generator)


@torch.no_grad()
def sample(sde: VPSDE, eps_fn: EpsFn, x_init: Tensor, steps: int, *, sampler: str = "ode", eps: float = 1e-3,
           generator: torch.Generator | None = None) -> Tensor:
    """Integrate from pure noise ``x_init`` at t = 1 back to t = 0 (the reference's ``euler_maruyama``).

    The grid is ``steps`` even points from 1 down to ``eps``, then 0: ``steps`` steps, the last one (ε_t → 0)
    taken without noise.

    Args:
        sde: the forward process.
        eps_fn: the noise prediction ``(x_t, t [B]) -> ε̂``.
        x_init: ``[B, ...]`` standard normal noise.
        steps: sampler steps (≥ 1; 50 for the reference's training grids, 1000 for its FID samples with ``sde``).
        sampler: ``ode`` (probability flow, deterministic given ``x_init``) or ``sde`` (Euler–Maruyama).
        eps: the smallest positive time of the grid.
        generator: the noise of the ``sde`` steps.

    Returns:
        Samples like ``x_init``.
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; valid: {', '.join(SAMPLERS)}")
    if steps < 1:
        raise ValueError(f"a sampler needs at least one step; got {steps}")
    grid = [0.0, *torch.linspace(eps, 1.0, steps, dtype=torch.float64).tolist()] if steps > 1 else [0.0, 1.0]
    x = x_init
    for s, t in reversed(list(zip(grid, grid[1:], strict=False))):
        tt = torch.full((len(x),), t, device=x.device, dtype=torch.float32)
        x, mean = sde.reverse_step(x, tt, s - t, eps_fn(x, tt), ode=sampler == "ode", generator=generator)
        if s == 0:
            x = mean
    return x
