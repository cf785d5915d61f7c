"""From a config to the objects a run needs: the data and the model (one function each, no hidden state)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import nn

from lab.analysis.frechet import digits_fd
from lab.config import PIXEL_TASKS, ExperimentConfig
from lab.data.image_split import ImageSplit
from lab.data.images import load_images
from lab.data.keyed import (
    NORMALIZATIONS,
    FileDataset,
    TensorDataset,
    eval_transform,
    tensor_transform,
    train_transform,
)
from lab.data.latents import LATENT_FOLDER, LatentDataset, decoder, read_latent_folder
from lab.data.readers import image_folder_files
from lab.data.text import TEXT, text_data
from lab.data.toy2d import TOY_DATASETS, ToyData, make_toy_data
from lab.nn.registry import create_model, model_parameters
from lab.train.loader import LoaderData
from lab.train.tasks import PixelTask


def build_data(cfg: ExperimentConfig, raw: ImageSplit | None = None) -> ToyData:
    """The train/test split of ``cfg.data``, as whole tensors.

    Toy sets: ``x [n, 2]``. Text: token ids ``x [n, data.tokens]``, each window labelled with the token after it
    (:func:`~lab.data.text.text_data`). Image sets: ``x [n, C, H, W]`` standardised per channel with the training
    images' statistics (fully-connected models flatten their input themselves); ``raw``: the set's pixels
    (:func:`raw_images`) when the caller has them already.

    Raises:
        DatasetNotFoundError: an image set's files are not under ``data.root`` (the message says which and where).
        ValueError: ``data.root`` is needed but empty.
    """
    d = cfg.data
    if d.name in TOY_DATASETS:
        return make_toy_data(d)
    if d.name == TEXT:
        return text_data(d.root, d.tokenizer, d.tokens, d.train_fraction)
    split = (raw if raw is not None else raw_images(cfg)).standardize()
    return ToyData(split.x_train, split.y_train, split.x_test, split.y_test, d.name)


def raw_images(cfg: ExperimentConfig) -> ImageSplit:
    """The image set of ``cfg.data`` as whole tensors of pixels in [0, 1] (:func:`build_data` standardises it).

    Raises:
        ValueError: a toy set, or ``data.root`` is needed but empty.
        DatasetNotFoundError: the set's files are not under ``data.root``.
    """
    d = cfg.data
    if d.name in TOY_DATASETS or d.name == TEXT:
        raise ValueError(f"data.name={d.name} is a {'toy set of points' if d.name != TEXT else 'text'}, not images")
    if d.name == LATENT_FOLDER:
        raise ValueError(f"data.name={LATENT_FOLDER} holds a VAE's latents, not images: it trains a diffusion model "
                         "with the loader engine (train.task=diffusion)")
    options: dict = {}
    if d.classes:
        options["classes"] = d.classes
    if d.max_per_class:
        options["max_per_class"] = d.max_per_class
    if d.name in ("digits", "image_folder"):  # the others come with their official split and size
        options.update(seed=d.seed, test_fraction=1.0 - d.train_fraction)
        options["image_size"] = d.image_size or (8 if d.name == "digits" else 32)
    return load_images(d.name, d.root or None, **options)


def pixel_scale(cfg: ExperimentConfig) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(mean, std)`` per channel of the map from pixels in [0, 1] to what the loader engine gives a model of
    ``cfg`` (x = (pixels − mean) / std): the training images' statistics (:func:`build_data`), or ImageNet's for
    an ``image_folder`` read from its files (:mod:`lab.data.keyed`). A generative model's samples go back to
    pixels with it."""
    if cfg.data.name == "image_folder":
        return NORMALIZATIONS[cfg.data.normalize]
    if cfg.data.name == LATENT_FOLDER:  # decoded by the VAE into [−1, 1]
        return (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
    split = raw_images(cfg).standardize()
    return split.mean, split.std


def sample_decoder(cfg: ExperimentConfig) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """How a generative model of ``cfg``'s data turns its samples into images: through the VAE a latent folder was
    encoded with (:func:`lab.data.latents.decoder`, into [−1, 1]); None where the samples are images already."""
    return decoder(read_latent_folder(cfg.data.root)) if cfg.data.name == LATENT_FOLDER else None


def loader_data(cfg: ExperimentConfig) -> LoaderData:
    """The data sets of the loader engine (:mod:`lab.train.loader`).

    ``image_folder`` is read from its files batch by batch (:mod:`lab.data.keyed`: ``data.augment`` on the
    training images, the evaluation transform on the others; sides ``data.image_size``, default 32), so a tree
    the size of ImageNet never has to fit in memory. A ``latent_folder`` gives a VAE's latents
    (:mod:`lab.data.latents`), with the VAE's decoder for the samples. Every other set is :func:`build_data`'s
    tensors, with ``data.augment`` applied per sample to images.

    Raises:
        DatasetNotFoundError: the folder is missing or holds no images (before any training starts).
        VAENotFoundError: a latent folder's VAE is not where it was.
    """
    d = cfg.data
    if d.name == LATENT_FOLDER:
        if not d.root:
            raise ValueError(f"data.name={LATENT_FOLDER} needs data.root, the folder `python -m lab latents` wrote")
        index = read_latent_folder(d.root)  # read once: an ImageNet index lists every file
        train = LatentDataset(d.root, index, "train", sample=True, seed=cfg.train.seed)
        test, train_eval = (LatentDataset(d.root, index, split, sample=False) for split in ("test", "train"))
        return LoaderData(train, test, train_eval, len(index["classes"]), tuple(index["latent_shape"]),
                          decode=decoder(index))
    if d.name == "image_folder":
        if not d.root:
            raise ValueError("data.name=image_folder needs data.root, the folder holding the images")
        train, test, names = image_folder_files(d.root, classes=d.classes or None,
                                                max_per_class=d.max_per_class or None,
                                                test_fraction=1.0 - d.train_fraction, seed=d.seed)
        size = d.image_size or 32
        return LoaderData(FileDataset(train, train_transform(size, d.augment, d.normalize), seed=cfg.train.seed),
                          FileDataset(test, eval_transform(size, d.normalize)),
                          FileDataset(train, eval_transform(size, d.normalize)),
                          len(names), (3, size, size))
    # digits-FD's reference is the training digits as pixels (the config allows no other set): read them once
    raw = raw_images(cfg) if cfg.train.fd_samples else None
    data = build_data(cfg, raw)
    shape = tuple(data.x_train.shape[1:])
    if d.augment != "none" and len(shape) != 3:
        raise ValueError(f"data.augment={d.augment} needs images; {d.name} has inputs of shape {list(shape)}")
    augment = tensor_transform(shape[-1], d.augment) if len(shape) == 3 else None
    judge = None
    if raw is not None:
        scale = raw.standardize()
        judge = functools.partial(digits_fd, reference=raw.x_train, mean=scale.mean, std=scale.std)
    return LoaderData(TensorDataset(data.x_train, data.y_train, augment, seed=cfg.train.seed),
                      TensorDataset(data.x_test, data.y_test), TensorDataset(data.x_train, data.y_train),
                      data.num_classes, shape, judge=judge)


def check_data(cfg: ExperimentConfig, data: ToyData | LoaderData, processes: int = 1) -> None:
    """What the data must give for ``cfg`` to train, checked before a run folder is made.

    Raises:
        ValueError: no training or no test samples (``data.train_fraction``), fewer than two classes for a
            classifier, or (loader engine) fewer samples than one update's batch; the message names the setting.
    """
    train = data.train if isinstance(data, LoaderData) else data.x_train
    test = data.test if isinstance(data, LoaderData) else data.x_test
    d, t = cfg.data, cfg.train
    if len(train) == 0 or len(test) == 0:
        split = "training" if len(train) == 0 else "test"
        raise ValueError(f"{d.name} with data.train_fraction={d.train_fraction:g} leaves no {split} samples "
                         f"({len(train)} training, {len(test)} test): evaluation and best.pt need both; choose a "
                         "fraction strictly between 0 and 1")
    if t.task == "classify" and data.num_classes < 2:
        raise ValueError(f"{d.name} gives {data.num_classes} class: a classifier needs at least 2")
    if isinstance(data, LoaderData):
        update = t.batch_size * t.accum_steps * processes
        if len(train) < update:
            raise ValueError(f"{len(train)} training samples are fewer than one update's batch of {update} "
                             f"(train.batch_size={t.batch_size} × train.accum_steps={t.accum_steps} × {processes} "
                             "process(es)): lower the batch or use more data")


def build_task(cfg: ExperimentConfig, data: ToyData) -> PixelTask | None:
    """The generative task a residual MLP of ``cfg`` learns on ``data``'s images (None: ``classify``)."""
    if cfg.train.task not in PIXEL_TASKS:
        return None
    return PixelTask(cfg.train.task, math.prod(data.x_train.shape[1:]), cfg.train.mask_ratio)


def build_model(cfg: ExperimentConfig, data: ToyData | LoaderData | None = None) -> nn.Module:
    """The model of ``cfg.model``, initialised from ``cfg.model.seed``, with ``cfg.train``'s drop-path rate.

    The builder receives exactly the keys the config sets, plus what it takes and the config leaves unset:
    ``in_dim`` (features per input), ``in_chans`` (image channels), ``img_size`` (image side) and
    ``num_classes``, read off ``data`` (built from ``cfg.data`` when not given; toy sets need no data for that:
    two features, two classes); for a generative task of the residual MLP, the task's inputs and outputs
    (:func:`build_task`).
    """
    m = cfg.model
    params, _ = model_parameters(m.name)
    kwargs = m.builder_kwargs()
    wanted = [k for k in ("in_dim", "in_chans", "img_size", "num_classes") if k in params and k not in kwargs]
    if wanted:
        if data is None and cfg.data.name in TOY_DATASETS:
            shape, classes = (2,), 2
        elif isinstance(data, LoaderData):
            shape, classes = data.image_shape, data.num_classes
        else:
            data = data if data is not None else build_data(cfg)
            shape, classes = tuple(data.x_train.shape[1:]), data.num_classes
        known = {"in_dim": math.prod(shape), "in_chans": shape[0], "img_size": shape[-1], "num_classes": classes}
        task = build_task(cfg, data) if isinstance(data, ToyData) else None
        if task is not None:  # the task's corrupted pixels in, pixels (or noise) out
            known.update(in_dim=task.in_dim, num_classes=task.out_dim)
        kwargs.update({k: known[k] for k in wanted})
    if "drop_path_rate" in params:
        kwargs["drop_path_rate"] = cfg.train.drop_path_rate if cfg.train.droppath != "off" else 0.0
    return create_model(m.name, seed=m.seed, **kwargs)
