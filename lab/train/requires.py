"""What a training needs installed beyond the core, known from its config alone, and the refusal before anything is
written: the model's registry entry names its extras (``requires=`` of :func:`lab.nn.registry.register_model`), and
a latent folder or digits-FD during training add ``diffusion``. ``lab train``, ``lab sweep``, ``lab submit`` and the
reproduction's runs call :func:`require_extras` before they make a folder, so a run that cannot train is never
recorded ``failed`` with a traceback."""

from __future__ import annotations

from lab.config import ExperimentConfig
from lab.data.latents import LATENT_FOLDER
from lab.extras import MissingExtra, installed, needs_words
from lab.nn.registry import model_extras


def config_extras(cfg: ExperimentConfig) -> tuple[str, ...]:
    """The extras a training of ``cfg`` needs, installed or not: its model's (the registry's ``requires``, on the
    model's knobs as the builder sees them), ``diffusion`` for a VAE's latent folder (its samples are decoded by the
    VAE, diffusers') and for digits-FD during training (``train.fd_samples``: torchmetrics' Fréchet distance)."""
    needed = list(model_extras(cfg.model.name, cfg.model.builder_kwargs()))
    if cfg.data.name == LATENT_FOLDER or cfg.train.fd_samples:
        needed.append("diffusion")
    return tuple(dict.fromkeys(needed))


def missing_extras(cfg: ExperimentConfig) -> tuple[str, ...]:
    """The extras a training of ``cfg`` needs (:func:`config_extras`) that are not installed."""
    return tuple(e for e in config_extras(cfg) if not installed(e))


def require_extras(cfg: ExperimentConfig) -> None:
    """Refuse a training of ``cfg`` that needs an extra not installed, before anything is written.

    Raises:
        MissingExtra: the message names the config, the extras missing and the ``pip install`` line.
    """
    missing = missing_extras(cfg)
    if missing:
        raise MissingExtra(f"{cfg.name} (model {cfg.model.name}) {needs_words(missing)}", missing)
