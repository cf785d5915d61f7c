"""A network the lab did not train, brought in as an ordinary run folder so every analysis and page takes it.

``lab analyze alignment --model torchvision:resnet18 --weights FILE --data cifar10=DIR`` (and ``lab probe`` the same
way) first writes an *imported* run: ``config.json`` describes the network and the data it is analysed on, and its
``imported`` record names the weights file (its path, size and the SHA-256 of the very bytes loaded), how its keys
matched, the tensors left at their initialisation (``--strict false``), the classes of the network's head
(``head_classes``) and how the data were made into its inputs (``inputs``, one sentence); ``status.json`` reads
``completed`` at step 0 ("imported …; nothing trained"). The run keeps no copy of the weights: the analyses read them
from the recorded file when they load the run (:func:`~lab.train.checkpoint.load_checkpoint`), and refuse it if it
is gone or its bytes changed. The analyses then read the run as they read any
(:func:`~lab.reports.alignment.alignment_report`, the probe), and the Runs page lists and opens it.

**Shape.** The network is built as its weights say (:mod:`lab.nn.network_shape`): input channels from its stem,
classes from its head, a ViT's patch and image size from its patch and position embeddings — so a file saved by
``timm.create_model('resnet18', num_classes=10)`` loads strictly.

**Inputs.** The lab's tensors (the data set's images, standardised with its training statistics) are made into what
the network takes by an input stage (:mod:`lab.nn.input_stage`), as its library's evaluation transform would:
grey repeated to RGB, resized to its input size, normalised with ``data.normalize``: ``model`` (its library's mean
and std), ``data`` (the data's statistics, the lab's own convention) or ``none`` (raw pixels in [0, 1]); by default
(``auto``) ``model`` for a timm or torchvision network that takes its library's three channels, ``data`` otherwise.
The size is the network's (a ViT's is fixed by its position embedding, a ResNet's is its library's 224; an image
folder is read at it), or ``data.image_size`` where the user sets it (digits and image folders are resized as they
are read, other sets by the stage). ``data.normalize`` (and ``data.image_size`` of a set read at its own size) are
the import's: they are recorded in the network's input stage (``model.inputs``) and the ``imported`` record, not in
the data section.

**Hugging Face folders.** ``hf:DIR`` names a ``save_pretrained`` folder (:mod:`lab.nn.hf`): the run's model is
``hf_transformer`` with the folder's ``config.json`` as ``model.config``, its weights file the folder's own, loaded by
transformers (which converts a saved file's keys), its shape and inputs from ``config.json`` and
``preprocessor_config.json`` (:func:`~lab.nn.network_shape.hf_shape`). A language model is analysed on text
(``data.name=text``): ``data.tokenizer`` is the folder, ``data.tokens`` at most what its position embedding holds
(128 by default, or fewer where it holds fewer); it has no classes, and its record says so (``head_classes`` and
``data_classes`` None).

Nothing is written until the weights fit, the data are read and the network has run on them: any refusal leaves no
run folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import torch
import yaml

from lab.config import DataConfig, ExperimentConfig, ModelConfig, apply_overrides, to_dict
from lab.data.latents import LATENT_FOLDER
from lab.data.text import TEXT
from lab.data.toy2d import TOY_DATASETS, ToyData
from lab.nn.hf import DECODERS, HF_PREFIX, saved_model
from lab.nn.input_stage import NORMALIZE, PlannedInputs, plan_inputs
from lab.nn.network_shape import NetworkShape, hf_shape, read_shape
from lab.nn.networks import load_file, network_overrides, residual_steps
from lab.nn.registry import model_info, model_parameters
from lab.nn.weights import LoadReport, WeightsFile, read_weights
from lab.runfolder.layout import RunState
from lab.runs.store import Run, RunStore
from lab.train.build import build_data, build_model, raw_images

__all__ = ["RESIZED_AS_READ", "data_settings", "import_weights"]

RESIZED_AS_READ = ("digits", "image_folder")
"""The sets ``data.image_size`` resizes as they are read; any other keeps its size, and an imported network's input
stage resizes it."""
CHECK_INPUTS = 2
"""Test inputs the network runs on before anything is written (a block check that fails, inputs of the wrong
shape)."""


def import_weights(store: RunStore, spec: str, weights: str | Path | BinaryIO | None,
                   settings: dict[str, object] | None = None, *, strict: bool = True, blocks: str | None = None
                   ) -> tuple[Run, LoadReport]:
    """Write the imported run of the network ``spec`` with the weights file ``weights``, analysed on the data
    ``settings`` describe (dotted keys, as overrides: ``data.name``, ``data.root``, ``data.image_size``,
    ``data.normalize`` …; digits by default). ``blocks``: the residual blocks of a library network the lab has no
    adapter for, by name pattern (:mod:`lab.nn.named_blocks`).

    ``weights`` is a path (expanded and resolved, then read once) or a binary file already open whose ``name`` is
    its path (a page opens it inside its data folders; it is read from that descriptor, never reopened by name);
    None for a Hugging Face folder (``hf:DIR``), whose weights file is its own. Either way the file is read once now,
    and the SHA-256 recorded is that of the bytes loaded; the analyses read it again from that path and check those
    bytes. A Hugging Face language model is analysed on text (``data.name=text``, ``data.root`` the file), read by
    the tokenizer saved in its folder.

    Returns:
        The run, and how the file's keys matched the network's.

    Raises:
        ConfigError, ValueError: an unknown network or setting, inputs the network cannot be given, an open file
            without a path, a network that fails on the data; :class:`~lab.nn.weights.WeightsError` (a ValueError):
            a file that holds pickled objects, or keys that do not fit (when ``strict``); FileNotFoundError: no such
            file or data folder. Nothing is written then.
    """
    saved = saved_model(spec.removeprefix(HF_PREFIX)) if spec.startswith(HF_PREFIX) else None
    if saved is not None:
        spec = f"{HF_PREFIX}{saved.folder}"
        if weights is None:
            weights = saved.weights
    if weights is None:
        raise ValueError(f"{spec} needs its weights file (the lab downloads nothing)")
    source = Path(weights).expanduser().resolve() if isinstance(weights, str | Path) else _open_with_path(weights)
    settings = dict(settings or {})
    decoder = saved is not None and saved.config.get("model_type") in DECODERS
    if decoder and settings.get("data.name", "digits") != TEXT:
        raise ValueError(f"{spec} is a language model: it is analysed on text, --data text=FILE (read by its own "
                         "tokenizer)")
    if settings.get("data.name") == TEXT:
        if not decoder:
            raise ValueError("data text is read by a language model's own tokenizer: give a Hugging Face decoder "
                             "(hf:DIR of GPT-2 or a Llama-style model)")
        settings.setdefault("data.tokenizer", str(saved.folder))
        longest = saved.config.get("n_positions") or saved.config.get("max_position_embeddings")
        if isinstance(longest, int) and longest >= 2:  # the position embedding's length: the longest window
            if "data.tokens" not in settings:
                settings["data.tokens"] = min(longest, DataConfig.tokens)
            elif isinstance(settings["data.tokens"], int) and settings["data.tokens"] > longest:
                raise ValueError(f"data.tokens={settings['data.tokens']}: this model reads at most {longest} tokens "
                                 "(its position embedding); set data.tokens to that or less")
    normalize = str(settings.pop("data.normalize", "auto"))
    if normalize not in NORMALIZE:
        raise ValueError(f"data.normalize for an imported network is one of {', '.join(NORMALIZE)} (how its inputs "
                         f"are normalised); got {normalize!r}")
    network = network_overrides(spec, blocks)
    params, _ = model_parameters(network["model.name"])
    takes_stage = "inputs" in params
    size = _stage_size(settings, takes_stage)
    file = read_weights(source)
    shape = read_shape(network, file.state) if saved is None else hf_shape(saved.config, saved.preprocessor)
    if settings.get("data.name") == "image_folder" and "data.image_size" not in settings and takes_stage:
        side = shape.img_size or (shape.library.size if shape.library is not None and shape.in_chans in (None, 3)
                                  else None)
        if side:  # read the files at the network's side rather than at 32 px, then upsampled
            settings["data.image_size"] = side
    task = model_info(network["model.name"]).task  # what the network's forward serves: classify, mae, diffusion
    label = f"hf-{saved.folder.name}" if saved is not None else spec.replace(":", "-")
    base = ExperimentConfig(name=f"imported-{label}", model=ModelConfig(name="residual_mlp"))
    cfg = apply_overrides(base, {"data.name": "digits", "train.task": task,
                                 "train.engine": "tensor" if task == "classify" else "loader", **network,
                                 **shape.overrides(params), **settings})
    data, planned = _data_and_inputs(cfg, shape, normalize, size, takes_stage)
    if planned.stage is not None:
        cfg = apply_overrides(cfg, {"model.inputs": planned.stage})
    model = build_model(cfg, data)
    report = load_file(model, cfg.model.name, file, strict=strict)
    if task in ("classify", "mae"):
        _check_runs(model, data, spec)
    record = _record(spec, file, report, strict, blocks, shape, planned, model, data, task)
    run = store.create(cfg.name)  # everything is known to work: only now is anything written
    try:
        run.write_config(to_dict(cfg), imported=record)
        run.write_status(RunState.COMPLETED, f"imported {spec} from {Path(file.name).name} ({report.text()}); "
                         "nothing trained", step=0, total_steps=0)
    except BaseException:
        shutil.rmtree(run.path, ignore_errors=True)
        raise
    return run, report


def _open_with_path(f: BinaryIO) -> BinaryIO:
    """An open weights file, once it is known to name its path (the analyses read the weights again from it)."""
    name = getattr(f, "name", None)
    if not isinstance(name, str) or not Path(name).is_absolute():
        raise ValueError("the weights file given open has no path the analyses could read it from again (the lab "
                         "keeps no copy of an imported network's weights): open it from a file, or pass its path")
    return f


def _stage_size(settings: dict[str, object], takes_stage: bool) -> int | None:
    """``data.image_size`` for a set read at its own size, taken out of ``settings`` for the input stage (None: not
    set, or set for a set resized as it is read)."""
    if str(settings.get("data.name", "digits")) in RESIZED_AS_READ or "data.image_size" not in settings:
        return None
    if not takes_stage:
        return None  # the data section refuses it, naming the sets it applies to
    size = settings.pop("data.image_size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= 4096:
        raise ValueError(f"data.image_size is a side in pixels, 0 to 4096 (0: the network's own); got {size!r}")
    return size or None


def _data_and_inputs(cfg: ExperimentConfig, shape: NetworkShape, normalize: str, size: int | None,
                     takes_stage: bool) -> tuple[ToyData, PlannedInputs]:
    """The data as the analyses will build them, and how they become the network's inputs."""
    if cfg.data.name in TOY_DATASETS or cfg.data.name in (LATENT_FOLDER, TEXT):
        if normalize != "auto" or size is not None:
            raise ValueError(f"data.normalize and data.image_size adapt images; {cfg.data.name} holds none")
        data = build_data(cfg)
        words = (f"{cfg.data.root} in {len(data.x_train) + len(data.x_test)} windows of {cfg.data.tokens} tokens "
                 f"(tokenised by {cfg.data.tokenizer}'s tokenizer), each labelled with the token after it"
                 if cfg.data.name == TEXT else f"{cfg.data.name} as the lab gives it")
        return data, PlannedInputs(None, "data", words)
    raw = raw_images(cfg)
    scale = raw.statistics()  # what build_data standardises with, and the input stage undoes
    data = build_data(cfg, raw)
    channels, side = int(data.x_train.shape[1]), int(data.x_train.shape[-1])
    asked = size or (cfg.data.image_size if cfg.data.name in RESIZED_AS_READ else 0) or None
    library = shape.library
    if shape.img_size is not None:  # a ViT: its position embedding fixes its side
        if asked is not None and asked != shape.img_size:
            raise ValueError(f"this ViT takes {shape.img_size} × {shape.img_size} images (its position embedding "
                             f"holds {shape.img_size // shape.patch_size} × {shape.img_size // shape.patch_size} "
                             f"patches of {shape.patch_size} px): set data.image_size={shape.img_size} or leave it "
                             "unset")
        target = shape.img_size
    elif asked is not None:
        target = asked
    elif library is not None and takes_stage and (shape.in_chans or channels) == len(library.mean):
        target = library.size  # a library network on its library's inputs: its input size
    else:
        target = side
    planned = plan_inputs(data=cfg.data.name, data_channels=channels, data_size=side, data_scale=scale,
                          channels=shape.in_chans or channels, size=target,
                          library=None if library is None else (library.mean, library.std, library.interpolation,
                                                                library.source),
                          normalize=normalize, stage=takes_stage)
    return data, planned


def _check_runs(model: torch.nn.Module, data: ToyData, spec: str) -> None:
    """Run the network on a few test inputs, as the analyses will (its residual steps' stream and its features).

    Raises:
        ValueError: it does not run on them (inputs of another shape, a named block that is no h + F(h) …).
    """
    x = data.x_test[:CHECK_INPUTS]
    try:
        with torch.no_grad():
            residual_steps(model.eval()).forward_intermediates(x)
    except (RuntimeError, IndexError, TypeError) as err:  # torch's shape errors
        problem = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{spec} does not run on the analysed inputs ({data.name}, {tuple(x.shape[1:])}): "
                         f"{problem}") from None


def _record(spec: str, file: WeightsFile, report: LoadReport, strict: bool, blocks: str | None,
            shape: NetworkShape, planned: PlannedInputs, model: torch.nn.Module, data: ToyData, task: str
            ) -> dict[str, Any]:
    """The ``imported`` record of config.json."""
    head = shape.head_classes
    text = data.name == TEXT  # a language model: no classes, its head predicts the next token
    if head is None and task == "classify" and not text:
        head = getattr(model, "num_classes", None) or data.num_classes
    return {"network": spec, "weights": file.name, "sha256": file.sha256, "size": file.size, "keys": report.text(),
            "strict": strict, "blocks": blocks, "initialised": report.initialised, "head_classes": head,
            "data_classes": None if text else data.num_classes, "inputs": planned.text, "normalize": planned.normalize}


def data_settings(data: str = "digits", sets: Sequence[str] = ()) -> dict[str, object]:
    """The settings :func:`import_weights` takes, from ``--data NAME[=DIR]`` and ``--set KEY=VALUE`` as typed:
    ``{"data.name": NAME, "data.root": DIR, KEY: VALUE …}``, each value read as a config file reads it (32 is a
    number).

    Raises:
        ValueError: a ``--set`` item without ``=`` or without a dotted key.
    """
    name, _, folder = data.partition("=")
    settings: dict[str, object] = {"data.name": name, **({"data.root": folder} if folder else {})}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise ValueError(f"--set takes KEY=VALUE with a dotted key (data.image_size=32), got {item!r}")
        settings[key] = yaml.safe_load(value)
    return settings
