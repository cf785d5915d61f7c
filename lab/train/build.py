"""From a config to the objects a run needs: the data and the model (one function each, no hidden state)."""

from __future__ import annotations

import math

from torch import nn

from lab.config import ExperimentConfig
from lab.data.images import load_images
from lab.data.toy2d import TOY_DATASETS, ToyData, make_toy_data
from lab.nn.registry import create_model, model_parameters


def build_data(cfg: ExperimentConfig) -> ToyData:
    """The train/test split of ``cfg.data``, as whole tensors.

    Toy sets: ``x [n, 2]``. Image sets: ``x [n, C, H, W]`` standardised per channel with the training images'
    statistics (fully-connected models flatten their input themselves).

    Raises:
        DatasetNotFoundError: an image set's files are not under ``data.root`` (the message says which and where).
        ValueError: ``data.root`` is needed but empty.
    """
    d = cfg.data
    if d.name in TOY_DATASETS:
        return make_toy_data(d)
    options: dict = {}
    if d.classes:
        options["classes"] = d.classes
    if d.max_per_class:
        options["max_per_class"] = d.max_per_class
    if d.name in ("digits", "image_folder"):  # the others come with their official split and size
        options.update(seed=d.seed, test_fraction=1.0 - d.train_fraction)
        options["image_size"] = d.image_size or (8 if d.name == "digits" else 32)
    split = load_images(d.name, d.root or None, **options).standardize()
    return ToyData(split.x_train, split.y_train, split.x_test, split.y_test, d.name)


def build_model(cfg: ExperimentConfig, data: ToyData | None = None) -> nn.Module:
    """The model of ``cfg.model``, initialised from ``cfg.model.seed``, with ``cfg.train``'s drop-path rate.

    The builder receives exactly the keys the config sets, plus what it takes and the config leaves unset:
    ``in_dim`` (features per input), ``in_chans`` (image channels) and ``num_classes``, read off ``data`` (built
    from ``cfg.data`` when not given; toy sets need no data for that: two features, two classes).
    """
    m = cfg.model
    params, _ = model_parameters(m.name)
    kwargs = m.builder_kwargs()
    wanted = [k for k in ("in_dim", "in_chans", "num_classes") if k in params and k not in kwargs]
    if wanted:
        if data is None and cfg.data.name in TOY_DATASETS:
            shape, classes = (2,), 2
        else:
            data = data if data is not None else build_data(cfg)
            shape, classes = tuple(data.x_train.shape[1:]), data.num_classes
        known = {"in_dim": math.prod(shape), "in_chans": shape[0], "num_classes": classes}
        kwargs.update({k: known[k] for k in wanted})
    if "drop_path_rate" in params:
        kwargs["drop_path_rate"] = cfg.train.drop_path_rate if cfg.train.droppath != "off" else 0.0
    return create_model(m.name, seed=m.seed, **kwargs)
