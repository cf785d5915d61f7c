"""The discrete noise schedule that U-ViT trains with on latents, its ε-prediction loss and its DPM-Solver sampler.

The reference code's ImageNet latent models (``train_ldm_discrete.py``) use Stable Diffusion's schedule: N = 1000
steps of β_n = (√0.00085 + (n − 1)/(N − 1) (√0.012 − √0.00085))², n = 1 … N, and

    x_n = √ᾱ_n x₀ + √(1 − ᾱ_n) ε,        ᾱ_n = ∏_{i ≤ n} (1 − β_i),

with n drawn uniformly from {1, …, N}; the network predicts ε from (x_n, n). At sampling the reference treats the
schedule as continuous time t = n / N (``NoiseScheduleVP('discrete')``), feeds the network N t, and runs
DPM-Solver++ (third order, single-step) from t = 1 to t = 1 / N on an even time grid.

Here the schedule is diffusers' ``scaled_linear`` one (``alphas_cumprod[j]`` is ᾱ_{j+1}: diffusers counts from 0,
the reference from 1; a test compares them on the formula), and the sampler is diffusers'
``DPMSolverSinglestepScheduler`` with the reference's algorithm (``dpmsolver++``), order (3) and end point (ᾱ_1,
``final_sigmas_type="sigma_min"``), stepping on its even grid of integer timesteps 999 … 0. One difference stays:
each third-order step of the reference evaluates the network at 1/3 and 2/3 of the step's log-SNR interval,
diffusers at the grid's own timesteps (the same number of network evaluations, ``steps``).

Times at this module's interface are continuous, t = n / N ∈ (0, 1], like the VP-SDE's (:mod:`lab.nn.vpsde`), so a
model, its probe and its sampler read the same on either schedule.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["DiscreteSchedule"]

EpsFn = Callable[[Tensor, Tensor], Tensor]  # (x_t [B, ...], t [B]) -> ε̂ [B, ...]


def _per_sample(s: Tensor, x: Tensor) -> Tensor:
    return s.reshape(-1, *([1] * (x.dim() - 1))).to(x.dtype)


class DiscreteSchedule:
    """Stable Diffusion's discrete schedule (see the module docstring).

    Args:
        num_steps: N, the training timesteps.
        beta_start: β_1.
        beta_end: β_N.
    """

    samplers = ("dpm_solver",)

    def __init__(self, num_steps: int = 1000, beta_start: float = 0.00085, beta_end: float = 0.012) -> None:
        from diffusers import DDPMScheduler

        if num_steps < 2 or not 0 < beta_start < beta_end < 1:
            raise ValueError(f"the discrete schedule needs N ≥ 2 and 0 < beta_start < beta_end < 1; got {num_steps}, "
                             f"{beta_start}, {beta_end}")
        self.config = dict(num_train_timesteps=num_steps, beta_start=beta_start, beta_end=beta_end,
                           beta_schedule="scaled_linear")
        self.num_steps = num_steps
        self.alphas_cumprod = DDPMScheduler(**self.config).alphas_cumprod.double()  # [N]: ᾱ_1 … ᾱ_N

    def net_time(self, t: Tensor) -> Tensor:
        """The time the network sees: the step n = round(N t), exactly (the reference's ``n`` in training and
        ``t_continuous * N`` at sampling, which is n on this sampler's integer grid)."""
        return self.step_of(t).to(t.dtype)

    def step_of(self, t: Tensor) -> Tensor:
        """The step n = round(N t) ∈ {1, …, N} of continuous times ``t [B]``."""
        return (t * self.num_steps).round().long().clamp(1, self.num_steps)

    def cum_alpha(self, t: Tensor) -> Tensor:
        """ᾱ_n at n = :meth:`step_of` (t)."""
        return self.alphas_cumprod.to(t.device)[self.step_of(t) - 1].to(t.dtype)

    def perturb(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """x_n = √ᾱ_n x₀ + √(1 − ᾱ_n) ε for ``x0 [B, ...]``, ``t [B]`` (n = round(N t)), ``noise`` like ``x0``."""
        a = self.alphas_cumprod.to(x0.device)[self.step_of(t) - 1]
        return _per_sample(a.sqrt(), x0) * x0 + _per_sample((1 - a).sqrt(), x0) * noise

    def loss(self, eps_fn: EpsFn, x0: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The ε-prediction loss per sample (the reference's ``LSimple``): n ~ U{1, …, N}, ε ~ N(0, I),
        ``mean((ε − eps_fn(x_n, n / N))²)`` over each sample's elements → ``[B]``."""
        n = torch.randint(1, self.num_steps + 1, (len(x0),), device=x0.device, generator=generator)
        t = n.float() / self.num_steps
        noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
        return (noise - eps_fn(self.perturb(x0, t, noise), t)).pow(2).flatten(1).mean(1)

    def solver(self, steps: int):
        """diffusers' DPM-Solver++ (order 3, single-step) on this schedule, set to ``steps`` network evaluations."""
        from diffusers import DPMSolverSinglestepScheduler

        if steps < 1:
            raise ValueError(f"a sampler needs at least one step; got {steps}")
        solver = DPMSolverSinglestepScheduler(**self.config, solver_order=3, algorithm_type="dpmsolver++",
                                              lower_order_final=True, final_sigmas_type="sigma_min")
        solver.set_timesteps(steps)
        return solver

    @torch.no_grad()
    def sample(self, eps_fn: EpsFn, x_init: Tensor, steps: int, *, sampler: str = "dpm_solver",
               generator: torch.Generator | None = None) -> Tensor:
        """Integrate from pure noise ``x_init`` at n = N back to n = 1 with DPM-Solver++ (deterministic: ``generator``
        is not used; it is here for the VP-SDE's signature).

        Args:
            eps_fn: the noise prediction ``(x_t, t [B]) -> ε̂``.
            x_init: ``[B, ...]`` standard normal noise.
            steps: network evaluations (50 for the reference's latent models).
            sampler: ``dpm_solver``, the only one.

        Returns:
            Samples like ``x_init``.
        """
        if sampler not in self.samplers:
            raise ValueError(f"unknown sampler {sampler!r} for the discrete schedule; valid: "
                             f"{', '.join(self.samplers)}")
        solver = self.solver(steps)
        x = x_init * solver.init_noise_sigma
        for j in solver.timesteps:
            t = torch.full((len(x),), (int(j) + 1) / self.num_steps, device=x.device)
            x = solver.step(eps_fn(x, t), j, x).prev_sample
        return x
