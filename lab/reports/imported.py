"""A network the lab did not train, brought in as an ordinary run folder so every analysis and page takes it.

``lab analyze alignment --model torchvision:resnet18 --weights FILE --data cifar10=DIR`` (and ``lab probe`` the same
way) first writes an *imported* run: ``config.json`` describes the network and the data it is analysed on, with the
weights file's path, the SHA-256 of the very bytes loaded and how its keys matched; ``checkpoints/last.pt`` holds
those weights under the lab model's keys; ``status.json`` reads ``completed`` at step 0 ("imported …; nothing
trained"). The analyses then read it as they read any run (:func:`~lab.reports.alignment.alignment_report`, the
probe), and the Runs page lists and opens it. The weights are read by :func:`~lab.nn.weights.load_weights`: once,
tensors only, every declared size checked before it is allocated, every key checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import yaml

from lab.config import ExperimentConfig, ModelConfig, apply_overrides, to_dict
from lab.nn.networks import WRAPPED, network_overrides
from lab.nn.registry import model_info
from lab.nn.weights import LoadReport, load_weights
from lab.runfolder.layout import Checkpoint, RunState
from lab.runs.store import Run, RunStore
from lab.train.build import build_data, build_model
from lab.train.checkpoint import save_checkpoint


def import_weights(store: RunStore, spec: str, weights: str | Path | BinaryIO,
                   settings: dict[str, object] | None = None, *, strict: bool = True, blocks: str | None = None
                   ) -> tuple[Run, LoadReport]:
    """Write the imported run of the network ``spec`` with the weights file ``weights``, analysed on the data
    ``settings`` describe (dotted keys, as overrides: ``data.name``, ``data.root``, ``data.image_size`` …; digits by
    default). ``blocks``: the residual blocks of a library network the lab has no adapter for, by name pattern
    (:mod:`lab.nn.named_blocks`).

    ``weights`` is a path (expanded and resolved, then read once) or a binary file already open (a page opens it
    inside its data folders; it is read from that descriptor, never reopened by name). Either way the file is read
    once, and the SHA-256 recorded is that of the bytes loaded.

    Raises:
        ConfigError, ValueError: an unknown network or setting; :class:`~lab.nn.weights.WeightsError` (a
            ValueError): a file that holds pickled objects, or keys that do not fit (when ``strict``);
            FileNotFoundError: no such file or data folder. Nothing is written then.
    """
    source = Path(weights).expanduser().resolve() if isinstance(weights, str | Path) else weights
    name = spec.replace(":", "-")
    base = ExperimentConfig(name=f"imported-{name}", model=ModelConfig(name="residual_mlp"))
    network = network_overrides(spec, blocks)
    task = model_info(network["model.name"]).task  # what the network's forward serves: classify, mae, diffusion
    cfg = apply_overrides(base, {"data.name": "digits", "train.task": task,
                                 "train.engine": "tensor" if task == "classify" else "loader", **network,
                                 **(settings or {})})
    data = build_data(cfg)
    model = build_model(cfg, data)
    target = model.model if cfg.model.name in WRAPPED else model
    report = load_weights(target, source, strict=strict)  # before any folder exists: a refusal writes nothing
    run = store.create(cfg.name)
    run.write_config(to_dict(cfg), imported={"network": spec, "weights": report.name, "sha256": report.sha256,
                                             "keys": report.text(), "strict": strict, "blocks": blocks})
    save_checkpoint(run, {"model": model.state_dict(), "step": 0}, Checkpoint.LAST)
    run.write_status(RunState.COMPLETED, f"imported {spec} from {Path(report.name).name} ({report.text()}); "
                     "nothing trained", step=0, total_steps=0)
    return run, report


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
