"""Experiment configuration: the model, data and training sections, YAML round-trip and strict dotted overrides.

A config is a tree of frozen dataclasses on the engine of :mod:`lab.strict`: every leaf field may carry bounds or a
set of choices in its metadata; construction validates them, so an invalid config cannot exist. Loading from a
mapping is strict: an unknown key is an error that names itself and the valid keys, because a silently ignored typo
(``model.alpha_mni=0.5``) is a wasted experiment. A renamed key is the one exception: its old name still loads, as
the new key, with a ``DeprecationWarning`` (``train.drop_rate`` is now ``train.drop_path_rate``); giving both names
is an error.

Example:
    >>> cfg = load_config("spiral", ["model.depth=16", "train.lr=0.01"])  # a packaged config, or a YAML path
    >>> cfg.model.depth
    16
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from lab import strict
from lab.data.images import IMAGE_DATASETS
from lab.data.latents import LATENT_FOLDER
from lab.data.text import TEXT
from lab.data.toy2d import TOY_DATASETS
from lab.nn.diffusion import SAMPLERS, SCHEDULE_SAMPLERS
from lab.nn.mlp import ACTIVATIONS
from lab.nn.registry import model_info, model_parameters
from lab.runs.store import Run
from lab.seeds import SEED_MAX
from lab.shortcuts import SCHEDULES
from lab.strict import (
    RENAMED,
    ConfigError,
    bounded,
    coerce,
    flatten,
    from_dict,
    parse_override,
    to_dict,
    validate,
)

__all__ = ["CONFIGS", "ConfigError", "DataConfig", "ExperimentConfig", "ModelConfig", "TrainConfig",
           "apply_overrides", "config_path", "flatten", "from_dict", "load_config", "packaged_configs",
           "parse_override", "save_config", "to_dict"]

T = TypeVar("T")
"""The config dataclass :func:`apply_overrides` returns: the one it is given."""

DROPPATH_MODES = ("off", "droppath", "residual_droppath")
OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("constant", "cosine", "warmup_cosine", "warmup_constant")
TASKS = ("classify", "masked", "denoise", "mae", "diffusion")
PIXEL_TASKS = ("masked", "denoise")  # the residual MLP's generative tasks on flattened images (lab.train.tasks)
GENERATIVE = ("mae", "diffusion")  # tasks whose model computes its own loss; only the loader engine trains them
ENGINES = ("auto", "tensor", "loader")
PRECISIONS = ("auto", "fp32", "bf16")
WEIGHT_DECAY_ON = ("weights", "all")
AUGMENTS = ("none", "flip", "mae", "resized_crop", "crop_flip", "timm")
NORMALIZE = ("imagenet", "symmetric")
DATASETS = (*TOY_DATASETS, *IMAGE_DATASETS, LATENT_FOLDER, TEXT)
DEVICE_NAME = re.compile(r"auto|cpu|mps|cuda(:[0-9]{1,4})?")
"""The devices ``train.device`` may name; a config from elsewhere naming any other would fail only once its run
folder exists (torch refuses it when the model is moved)."""


RENAMED.update({
    "train.drop_rate": ("train.drop_path_rate", "it is the drop-path rate"),
})


# Model knobs every config section names alike; None leaves the builder's default. Other keyword arguments of a
# builder (preact, norm, depths, channels, feature_size, ...) are extra keys of the model section.
_MODEL_FIELDS = ("depth", "width", "activation", "shortcut", "alpha_min", "zero_init", "in_dim", "num_classes")
# Builder arguments a config never sets in the model section: the drop-path rate comes from the train section.
_NOT_MODEL_KEYS = ("drop_path_rate",)


@dataclass(frozen=True)
class ModelConfig:
    """The network: a registered model name, its initialisation seed and its builder's keyword arguments.

    The common knobs are fields; None leaves the builder's own default (FC ResNets default to ReLU, the residual
    MLP to GELU). Any other keyword argument of the builder is an extra key of the section (``model.preact``,
    ``model.depths``), kept in ``extra``. Construction checks every key against the builder's signature: a key the
    model does not take is an error naming the keys it does take, so no model silently receives (or ignores) a
    knob meant for another. ``in_dim``, ``in_chans`` and ``num_classes`` left unset are read off the data.
    """

    _section = "model"
    name: str = bounded("residual_mlp", doc="registered model name (lab.list_models())")
    depth: int | None = bounded(None, lo=1, hi=1024, doc="number of residual blocks L")
    width: int | None = bounded(None, lo=1, hi=65536, doc="hidden width H (D of the residual stream)")
    activation: str | None = bounded(None, choices=ACTIVATIONS)
    shortcut: str | None = bounded(None, choices=SCHEDULES, doc="alpha schedule (lab.shortcuts); none = no skips")
    alpha_min: float | None = bounded(None, lo=0.0, hi=1.0, doc="last block's shortcut scale for decayed schedules")
    zero_init: bool | None = bounded(None, doc="zero-initialise each branch's output layer (Residual Connections Harm "
                                              "Generative Representation Learning, §3.2)")
    in_dim: int | None = bounded(None, lo=1, doc="input features (default: from the data)")
    num_classes: int | None = bounded(None, lo=0, doc="classes (default: from the data); 0: an unconditional "
                                                     "diffusion model")
    seed: int = bounded(0, lo=0, hi=SEED_MAX, doc="initialisation seed, kept apart from data and batch seeds")
    extra: tuple[tuple[str, Any], ...] = field(default=(), metadata={"doc": "other builder arguments, by name"})

    def __post_init__(self) -> None:
        validate(self)
        try:
            params, takes_any = model_parameters(self.name)
        except ValueError as err:
            raise ConfigError(f"model.name: {err}") from None
        valid = ["name", "seed", *(k for k in params if k not in _NOT_MODEL_KEYS)]
        listing = ", ".join(f"model.{k}" for k in valid)
        for key in _MODEL_FIELDS:
            if getattr(self, key) is not None and key not in params and not takes_any:
                raise ConfigError(f"model {self.name} does not take model.{key}; its keys: {listing}")
        coerced = []
        for key, value in self.extra:
            if key in _NOT_MODEL_KEYS:
                raise ConfigError(f"model.{key} is set by train.{key} (with train.droppath), not in the model section")
            if key in _MODEL_FIELDS or (key not in params and not takes_any):
                raise ConfigError(f"unknown key model.{key}; valid keys: {listing} (model {self.name})")
            coerced.append((key, _coerce_like(value, params[key].default if key in params else None, f"model.{key}")))
        object.__setattr__(self, "extra", tuple(coerced))

    def builder_kwargs(self) -> dict[str, Any]:
        """The keyword arguments given to the builder: the fields that are set, then the extra keys."""
        out = {k: getattr(self, k) for k in _MODEL_FIELDS if getattr(self, k) is not None}
        out.update(self.extra)
        return out

    def get(self, key: str, default: Any = None) -> Any:
        """A model key as the builder will see it: set in the config, else the builder's default, else ``default``."""
        kwargs = self.builder_kwargs()
        if key in kwargs:
            return kwargs[key]
        param = model_parameters(self.name)[0].get(key)
        return default if param is None or param.default is param.empty else param.default


def _coerce_like(value: Any, default: Any, name: str) -> Any:
    """Coerce an extra model key's value to the type of the builder's default (lists become tuples); None is
    passed on for the builder to accept or refuse."""
    if value is None:
        return None
    if isinstance(default, tuple) or isinstance(value, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} must be a list; got {value!r}")
        kind = type(default[0]) if isinstance(default, tuple) and default else None
        return tuple(coerce(v, kind, name) if kind in (int, float) else v for v in value)
    if isinstance(default, (bool, int, float, str)):
        return coerce(value, type(default), name)
    return value


DEFAULT_MODEL = ModelConfig(depth=32, width=32, activation="gelu", shortcut="identity", alpha_min=1.0)
"""The lab's default model: *ResidualDroppath: Enhancing Feature Reuse over Residual Connections*' 32 × 32 MLP."""


@dataclass(frozen=True)
class DataConfig:
    """A data set and its train/test split: a toy 2-D set (generated) or an image set (digits ship with the lab;
    the others are read from ``root``, never downloaded)."""

    _section = "data"
    name: str = bounded("spiral", choices=DATASETS)
    n: int = bounded(16384, lo=2, hi=10_000_000, doc="toy sets: number of samples, half per class")
    noise: float = bounded(0.0, lo=0.0, hi=10.0, doc="toy sets: noise level (Gaussian std for the spiral of "
                                                     "ResidualDroppath: Enhancing Feature Reuse over Residual "
                                                     "Connections)")
    train_fraction: float = bounded(0.8, lo=0.0, hi=1.0, lo_open=True, doc="share kept for training (toy sets, "
                                                                          "digits, image folders)")
    seed: int = bounded(0, lo=0, hi=SEED_MAX, doc="seed for sampling the data and splitting it")
    root: str = bounded("", doc="image sets other than digits: the local folder holding the files (latent_folder: "
                               "the folder `python -m lab latents` wrote; text: the UTF-8 file)")
    classes: int = bounded(0, lo=0, doc="image sets: keep the first N classes (0 = all)")
    max_per_class: int = bounded(0, lo=0, doc="image sets: at most N training images per class (0 = all)")
    image_size: int = bounded(0, lo=0, hi=4096, doc="digits and image folders: resize to N × N (0 = 8 for digits, "
                                                    "32 for image folders)")
    augment: str = bounded("none", choices=AUGMENTS, doc="loader engine, training images: flip = horizontal flips "
                                                         "(diffusion on CIFAR); mae = RandomResizedCrop "
                                                         "(scale 0.2-1) + flip as MAE pretraining; resized_crop = "
                                                         "scale 0.08-1 + flip (ImageNet classification); crop_flip "
                                                         "= padded random crop + flip (CIFAR); timm = timm's "
                                                         "training transform with its defaults (image folders); "
                                                         "none")
    workers: int = bounded(4, lo=0, hi=256, doc="loader engine: data-loading worker processes per training process")
    tokens: int = bounded(128, lo=2, hi=65536, doc="text: tokens per window (the inputs are the file's consecutive "
                                                   "windows, each labelled with the token after it)")
    tokenizer: str = bounded("", doc="text: the folder holding the tokenizer save_pretrained wrote (an imported "
                                     "hf:DIR sets its own)")
    normalize: str = bounded("imagenet", choices=NORMALIZE, doc="image folders: pixels standardised with ImageNet's "
                                                                "mean and std, or symmetric: mapped to [-1, 1], as the "
                                                                "U-ViT reference")

    def __post_init__(self) -> None:
        validate(self)
        if self.image_size and self.name not in ("digits", "image_folder"):
            raise ConfigError(f"data.image_size applies to digits and image_folder; {self.name} keeps its own size")
        if self.classes == 1:
            raise ConfigError("data.classes=1 keeps one class: a classifier needs at least 2 (0 keeps all)")
        if self.normalize != "imagenet" and self.name != "image_folder":
            raise ConfigError(f"data.normalize applies to image folders read from their files; {self.name} is "
                              "standardised with its own training statistics")
        if (self.classes or self.max_per_class) and self.name in TOY_DATASETS:
            raise ConfigError(f"data.classes and data.max_per_class apply to image sets; {self.name} has two "
                              "classes and data.n samples")
        if self.name == LATENT_FOLDER and (self.image_size or self.classes or self.max_per_class
                                           or self.augment != "none"):
            raise ConfigError(f"data.image_size, data.classes, data.max_per_class and data.augment are chosen when a "
                              f"{LATENT_FOLDER} is encoded (python -m lab latents; mirror images are in it); leave "
                              "them unset")
        if (self.name == TEXT) != bool(self.tokenizer) or (self.name == TEXT and not self.root):
            raise ConfigError("data.name=text reads data.root (a UTF-8 file) with data.tokenizer (a folder "
                              "save_pretrained wrote a tokenizer into); data.tokenizer applies to text alone")
        if self.max_per_class and self.name == "digits":
            raise ConfigError("data.max_per_class applies to image sets read from files; digits has ~180 images "
                              "per class: use data.train_fraction")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, regularisation and evaluation cadence."""

    _section = "train"
    optimizer: str = bounded("adam", choices=OPTIMIZERS)
    lr: float = bounded(0.01, lo=0.0, hi=100.0, lo_open=True)
    betas: tuple[float, float] = bounded((0.9, 0.999), lo=0.0, hi=1.0)
    weight_decay: float = bounded(0.0, lo=0.0, doc="λ; which parameters it decays: train.weight_decay_on")
    weight_decay_on: str = bounded("weights", choices=WEIGHT_DECAY_ON, doc="weights: not norms, biases or a model's "
                                                                        "no_weight_decay() (timm's rule); all: every "
                                                                        "parameter (Residual Alignment, Eq. 1)")
    momentum: float = bounded(0.9, lo=0.0, hi=1.0, doc="SGD only")
    lr_schedule: str = bounded("constant", choices=LR_SCHEDULES, doc="learning rate per step (lab.train.schedule)")
    warmup_steps: int = bounded(0, lo=0, doc="warmup_*: linear warmup from 0 over these steps")
    min_lr: float = bounded(0.0, lo=0.0, doc="cosine schedules: the learning rate they end at")
    batch_size: int = bounded(256, lo=1)
    epochs: int = bounded(6, lo=1)
    max_steps: int = bounded(0, lo=0, doc="stop after this many steps; 0 = no limit beyond epochs")
    droppath: str = bounded("off", choices=DROPPATH_MODES)
    drop_path_rate: float = bounded(0.0, lo=0.0, hi=1.0, doc="drop-path rate: probability of dropping a block's "
                                                              "branch per sample (timm's drop_path_rate)")
    eval_every: int = bounded(0, lo=0, doc="evaluate every N steps; 0 = once per epoch")
    log_every: int = bounded(10, lo=1, doc="record the training loss every N steps")
    seed: int = bounded(0, lo=0, hi=SEED_MAX, doc="seed for batch order and droppath masks")
    device: str = bounded("auto", doc="'auto' (CUDA when present), 'cpu', 'cuda[:i]' or 'mps'; whether this machine "
                                      "has it is checked when a run starts (lab.train.core.check_device)")
    threads: int = bounded(1, lo=0, hi=4096, doc="torch CPU threads, at most the machine's cores (more are cut to "
                                                "them); the toy models' small matmuls run fastest on one (and leave "
                                                "a core to a server); 0 keeps torch's default")
    task: str = bounded("classify", choices=TASKS, doc="classify: cross-entropy on labels; masked, denoise: a "
                                                       "residual MLP reconstructs hidden pixels or predicts the "
                                                       "noise of an image set (lab.train.tasks); mae: the model's "
                                                       "own masked-reconstruction loss (MAE pretraining); "
                                                       "diffusion: the ε-prediction loss of a U-ViT diffusion "
                                                       "model")
    mask_ratio: float = bounded(0.5, lo=0.0, hi=1.0, doc="task=masked: the share of each image's pixels hidden")
    engine: str = bounded("auto", choices=ENGINES, doc="tensor: whole data sets as tensors (toy and small image "
                                                       "sets); loader: a DataLoader per process, DDP under "
                                                       "torchrun; auto: loader for mae, diffusion or under "
                                                       "torchrun")
    lr_scaling: str = bounded("none", choices=("none", "batch256"), doc="batch256: the rate used is train.lr × "
                                                                      "global batch / 256 (MAE's base lr rule)")
    warmup_epochs: int = bounded(0, lo=0, doc="warmup_*: warmup length in epochs (adds to warmup_steps)")
    accum_steps: int = bounded(1, lo=1, hi=4096, doc="loader engine: micro-batches accumulated per update; "
                                                    "global batch = batch_size × accum_steps × processes")
    global_batch: int = bounded(0, lo=0, doc="loader engine: the global batch, whatever the processes (each takes "
                                            "global_batch / (accum_steps × processes) samples; train.batch_size is "
                                            "then unused); 0: batch_size × accum_steps × processes")
    precision: str = bounded("auto", choices=PRECISIONS, doc="loader engine: bf16 autocast (auto: on CUDA only)")
    compile: bool = bounded(False, doc="loader engine: torch.compile the model")
    checkpoint_every: int = bounded(1, lo=1, doc="loader engine: write checkpoints/last.pt every N epochs (and on "
                                                "stop)")
    save_every: int = bounded(0, lo=0, doc="also keep the weights every N steps as checkpoints/step-<step>.pt (0: "
                                          "never), as the U-ViT reference keeps its checkpoints; lab fid --select "
                                          "best scores each")
    probe_every: int = bounded(0, lo=0, doc="loader engine, mae and diffusion: a quick linear probe every N epochs "
                                           "(diffusion: the best over noise levels and blocks; 0 = never)")
    label_smoothing: float = bounded(0.0, lo=0.0, hi=1.0, doc="loader engine, classify: timm's label-smoothing "
                                                              "cross-entropy (0.1 is timm's training default)")
    rank_inputs: int = bounded(256, lo=2, doc="loader engine, mae: held-out images whose bottleneck features give "
                                             "the effective rank at each evaluation")
    ema: float = bounded(0.0, lo=0.0, hi=1.0, doc="loader engine: decay of an exponential moving average of the "
                                                 "weights kept beside them (timm's ModelEmaV3; 0 = none); a "
                                                 "diffusion model samples with it (0.9999 in U-ViT)")
    samples: int = bounded(64, lo=0, hi=1024, doc="loader engine, diffusion: images of the sample grid saved at each "
                                                 "evaluation (figures/samples-<step>.png; 0 = none)")
    sampler: str = bounded("ode", choices=SAMPLERS,
                          doc="loader engine, diffusion: the sampler of that grid: on the VP-SDE ode = probability "
                              "flow (the reference's training grids), sde = Euler-Maruyama (steadier for an "
                              "undertrained model); on the discrete schedule dpm_solver (DPM-Solver++)")
    sample_steps: int = bounded(50, lo=1, hi=10_000, doc="loader engine, diffusion: steps of that sampler (50, as the "
                                             "reference's training grids)")
    fd_samples: int = bounded(0, lo=0, hi=50_000, doc="loader engine, diffusion of digits: digits-FD of this many "
                                                     "samples (that sampler and steps) against the training digits "
                                                     "at each evaluation (metric digits_fd; 0 = none)")
    probe_samples: int = bounded(0, lo=0, doc="loader engine: images of each split the quick probes read (0: 5000 for "
                                             "mae, 2000 for diffusion)")

    def __post_init__(self) -> None:
        if len(self.betas) != 2:
            raise ConfigError(f"train.betas must have two values; got {list(self.betas)}")
        validate(self)
        if not DEVICE_NAME.fullmatch(self.device):
            raise ConfigError(f"train.device must be auto, cpu, cuda, cuda:N or mps; got {self.device!r} (auto takes "
                              "CUDA when this machine has it)")
        if self.lr_schedule.startswith("warmup_") and self.warmup_steps == 0 and self.warmup_epochs == 0:
            raise ConfigError(f"train.lr_schedule={self.lr_schedule} needs train.warmup_steps > 0 or "
                              "train.warmup_epochs > 0")
        if self.task in GENERATIVE and self.engine == "tensor":
            raise ConfigError(f"train.task={self.task} trains with the loader engine: set train.engine=loader or auto")
        if self.ema >= 1.0:
            raise ConfigError("train.ema must be below 1 (1 would never move the average)")
        if self.droppath == "residual_droppath" and self.accum_steps > 1:
            raise ConfigError("train.droppath=residual_droppath reuses one batch's masks in the next update, so it "
                              "cannot accumulate micro-batches: set train.accum_steps=1")
        if self.min_lr > self.lr:
            raise ConfigError(f"train.min_lr ({self.min_lr:g}) must not exceed train.lr ({self.lr:g})")
        if self.droppath != "off" and self.drop_path_rate >= 1.0:
            raise ConfigError("train.drop_path_rate must be < 1 when droppath is on (every branch would be dropped)")


LOADER_ONLY: dict[str, tuple[Any, ...]] = {
    "train.accum_steps": (1,), "train.precision": ("auto", "fp32"), "train.compile": (False,),
    "data.augment": ("none",), "train.probe_every": (0,), "train.label_smoothing": (0.0,), "train.ema": (0.0,),
    "train.fd_samples": (0,), "train.probe_samples": (0,),
}
"""Settings only the loader engine reads, with the values a tensor run accepts: any other value would be silently
ignored by the tensor engine, so a tensor run given one is refused (``lab.train.runner.resolved``). The schedule's
``train.warmup_epochs`` is not one of them: both engines read it."""


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: a name plus the model, data and train sections."""

    _section = "experiment"
    name: str = "spiral"
    model: ModelConfig = DEFAULT_MODEL
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/\\\0"):
            raise ConfigError(f"name must be non-empty and free of path separators; got {self.name!r}")
        task, name = self.train.task, self.model.name
        needed = model_info(name).task  # what the model's forward serves (the registry says)
        if task in PIXEL_TASKS:
            if name != "residual_mlp" or self.data.name in TOY_DATASETS or self.data.name == LATENT_FOLDER:
                raise ConfigError(f"train.task={task} trains model.name=residual_mlp on an image set such as "
                                  f"data.name=digits; this is {name} on {self.data.name}")
            if self.train.engine == "loader":
                raise ConfigError(f"train.task={task} trains with the tensor engine: set train.engine=tensor or auto")
        elif task != needed:
            what = {"classify": "a classifier", "mae": "a masked autoencoder with no classifier head",
                    "diffusion": "a diffusion model with no classifier head"}[needed]
            probe = " (and probe it afterwards with `python -m lab probe RUN`)" if needed == "mae" else ""
            raise ConfigError(f"train.task={task} cannot train {name}, which is {what}: set train.task={needed}"
                              f"{probe}")
        if self.model.num_classes == 0 and task != "diffusion":
            raise ConfigError(f"model.num_classes=0 means an unconditional diffusion model; {name} needs >= 1 (or "
                              "leave it unset: it is read off the data)")
        schedule = self.model.get("schedule")
        if task == "diffusion" and self.train.sampler not in SCHEDULE_SAMPLERS[schedule]:
            raise ConfigError(f"train.sampler={self.train.sampler} does not sample the {schedule} schedule of model "
                              f"{name}; valid: {', '.join(SCHEDULE_SAMPLERS[schedule])}")
        if self.train.fd_samples and (task != "diffusion" or self.data.name != "digits"):
            raise ConfigError(f"train.fd_samples measures digits-FD, of a diffusion model of the digits; this is "
                              f"train.task={task} on data.name={self.data.name}: set train.fd_samples=0 (and use "
                              "`python -m lab fid` with a reference folder)")
        if self.train.droppath != "off" and "drop_path_rate" not in model_parameters(self.model.name)[0]:
            raise ConfigError(f"model {self.model.name} has no drop paths: train.droppath={self.train.droppath} "
                              "would do nothing")


def apply_overrides(cfg: T, overrides: Iterable[str] | Mapping[str, Any]) -> T:
    """Return a copy of ``cfg`` with dotted overrides applied and the result re-validated
    (:func:`lab.strict.apply_overrides`); a new ``model.name`` drops the old model's keys the new one does not take.

    Raises:
        ConfigError: an unknown section or key (naming the valid ones), an invalid value, or a renamed key given
            under both its old and its new name.
    """
    return strict.apply_overrides(cfg, overrides, prepare=_new_model, open_sections=("model",))


def _new_model(data: dict[str, Any], items: list[tuple[str, Any]]) -> None:
    model_name = next((value for key, value in items if key == "model.name"), None)
    if isinstance(data.get("model"), dict) and isinstance(model_name, str) and model_name != data["model"]["name"]:
        _keep_model_keys(data["model"], model_name, {key.partition(".")[2] for key, _ in items})


def _keep_model_keys(section: dict[str, Any], name: str, overridden: set[str]) -> None:
    """On a change of ``model.name``, drop the old model's keys that the new one does not name (unless they are
    overridden too, in which case the new model's check names them), and say which with a ``UserWarning``: a
    base config's ``model.depth=8`` that vanishes unsaid looks like a setting the new model ignores. A builder that
    passes any other keyword on (a timm model's ``**timm_kwargs``) does not inherit the old model's ``depth`` or
    ``width`` either."""
    try:
        params, _ = model_parameters(name)
    except ValueError:
        return  # the unknown name is reported when the section is built
    dropped = [k for k in section if k not in ("name", "seed") and k not in params and k not in overridden]
    if not dropped:
        return
    keys = ", ".join(f"model.{key}={section[key]!r}" for key in dropped)
    warnings.warn(f"model.name={name} replaces {section['name']}: dropped {keys} ({name} does not take "
                  f"{'it' if len(dropped) == 1 else 'them'})", UserWarning, stacklevel=strict._caller_stacklevel())
    for key in dropped:
        del section[key]


CONFIGS = Path(__file__).resolve().parent / "configs"
"""The configs shipped inside the package: the papers' protocols, the full-scale runs and what the reproduction
trains. ``load_config("spiral")`` reads ``spiral.yaml`` from here, wherever the lab is installed."""


def packaged_configs() -> list[str]:
    """The names of the configs shipped with the lab (``spiral``, ``mae_vit_b16_in1k``, …)."""
    return sorted(p.stem for p in CONFIGS.glob("*.yaml"))


def config_path(name: str | Path) -> Path:
    """The config file ``name`` names: the file itself when it exists, else a packaged config (:data:`CONFIGS`) —
    by name (``spiral``), file name (``spiral.yaml``) or as the checkout spells it (``configs/spiral.yaml``), so the
    documented commands work from any folder after ``pip install``.

    Raises:
        ConfigError: no such file, and no packaged config of that name (the message lists them).
    """
    path = Path(name)
    if path.is_file():
        return path
    if path.parent in (Path("."), Path("configs")):
        packaged = CONFIGS / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
        if packaged.is_file():
            return packaged
    raise ConfigError(f"config file not found: {path} (nor a packaged config of that name; packaged: "
                      f"{', '.join(packaged_configs())})")


def load_config(path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()) -> ExperimentConfig:
    """Load an experiment config from YAML (or JSON) and apply dotted overrides; no path gives the defaults.

    ``path`` is a file, or the name of a packaged config (:func:`config_path`).
    """
    cfg = ExperimentConfig()
    if path is not None:
        path = config_path(path)
        try:
            text = path.read_text()
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
            where = getattr(err, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(f"config file {path} is not readable YAML{at}: {problem}") from None
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"config file {path} must hold a mapping of sections (model:, data:, train:); it "
                              f"holds a {type(data).__name__}")
        cfg = from_dict(ExperimentConfig, data or {})
    return apply_overrides(cfg, overrides)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write a config as YAML (or JSON for a ``.json`` path) that :func:`load_config` reads back equal."""
    path = Path(path)
    data = to_dict(cfg)
    text = json.dumps(data, indent=2) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)


def config_of_run(run: Run) -> ExperimentConfig:
    """The resolved config saved in a run's config.json, as the experiment config it was trained with.

    Raises:
        RunFolderError: config.json is missing or unreadable (never the defaults in its place).
        ConfigError: it does not hold a valid config.
    """
    return from_dict(ExperimentConfig, run.config_record()["config"])
