"""Linear probing of a run's checkpoint on frozen features, written to ``<run>/analysis/probe.json``.

The number *Residual Connections Harm Generative Representation Learning* reports for a pretrained encoder: a
linear classifier trained on the features of the (unaugmented) training images and tested on the held-out ones,
with the paper's ImageNet-100 protocol as its authors' released code runs it, or with MAE's BatchNorm head
(:func:`lab.analysis.probing.protocol_probe`, :data:`~lab.analysis.probing.PROTOCOLS`). Like the other reports
(:mod:`lab.reports.alignment`) it reads the run's config and a checkpoint (``weights_only=True``) and rebuilds the data
and the model as training did; the data come from :func:`lab.train.build.loader_data`, so an image folder is
read file by file and never has to fit in memory.

Extracting features is the long part, so they are kept in ``<run>/analysis/features-<layer>-<step>.pt`` (tensors
only, read back with ``weights_only=True``); probing again with other settings reuses them.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from lab.analysis.probing import PROTOCOLS, protocol_probe
from lab.config import config_of_run
from lab.reports.alignment import load_trained
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_bytes, atomic_write_json
from lab.runs.store import Run
from lab.train.core import resolve_device
from lab.train.loader import LoaderData
from lab.train.pretrain_eval import features

__all__ = ["block_index", "format_probe", "pool_tokens", "probe_report"]

_BLOCK = re.compile(r"blocks\.(\d+)")


def block_index(layer: str) -> int | None:
    """None for ``bottleneck``, i for ``blocks.{i}``.

    Raises:
        ValueError: any other name.
    """
    if layer == "bottleneck":
        return None
    match = _BLOCK.fullmatch(layer)
    if match is None:
        raise ValueError(f"unknown layer {layer!r}; valid: bottleneck or blocks.N (the output of block N)")
    return int(match.group(1))


def pool_tokens(h: torch.Tensor) -> torch.Tensor:
    """One feature vector per sample: ``[B, D]`` as it is, token sequences ``[B, N, D]`` averaged over all N tokens
    (a class token, where there is one, included), conv maps ``[B, C, H, W]`` averaged over H × W."""
    if h.ndim == 2:
        return h
    if h.ndim == 3:
        return h.mean(dim=1)
    if h.ndim == 4:
        return h.mean(dim=(2, 3))
    raise ValueError(f"cannot pool a layer output of shape {list(h.shape)}: expected [B, D], [B, N, D] or "
                     f"[B, C, H, W]")


class _Extractor(nn.Module):
    """The model seen through one layer, for :func:`lab.train.pretrain_eval.features`: ``forward_features`` gives
    the bottleneck (``block=None``) or block ``block``'s pooled output, and advances a progress bar."""

    def __init__(self, model: nn.Module, block: int | None, bar: tqdm) -> None:
        super().__init__()
        self.model, self.block, self.bar = model, block, bar

    def iter_blocks(self) -> Iterator[tuple[str, nn.Module]]:
        """The model's blocks, so ``eval_mode`` reaches block views that live outside ``modules()``."""
        yield from self.model.iter_blocks() if hasattr(self.model, "iter_blocks") else ()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if self.block is None:
            out = self.model.forward_features(x)
        else:  # [h_0, …, h_L]: h_{i+1} is block i's output
            out = pool_tokens(self.model.forward_intermediates(x, intermediates_only=True)[self.block + 1])
        self.bar.update(len(x))
        return out


def _num_blocks(model: nn.Module, data: LoaderData) -> int:
    if hasattr(model, "iter_blocks"):
        return sum(1 for _ in model.iter_blocks())
    x = data.test[0][0][None] if len(data.test) else data.train_eval[0][0][None]
    with torch.no_grad():
        return len(model.eval().forward_intermediates(x, intermediates_only=True)) - 1


def _fingerprint(model: nn.Module) -> torch.Tensor:
    """A cheap summary of the weights: a cache written for a same-step checkpoint of other weights is not used."""
    return torch.stack([p.detach().double().abs().sum() for p in model.state_dict().values()
                        if p.is_floating_point()] or [torch.zeros((), dtype=torch.float64)]).sum()


def _read_cache(path: Path, fingerprint: torch.Tensor, n_train: int, n_test: int) -> dict[str, torch.Tensor] | None:
    """The cached features cut to the first ``n_train``/``n_test`` samples, or None when the file is missing,
    unreadable, of other weights, or holds fewer samples."""
    if not path.is_file():
        return None
    try:
        cache = torch.load(path, map_location="cpu", weights_only=True)
        if not torch.equal(cache["fingerprint"], fingerprint):
            return None
        if len(cache["train"]) < n_train or len(cache["test"]) < n_test:
            return None
        return {"train": cache["train"][:n_train], "train_labels": cache["train_labels"][:n_train],
                "test": cache["test"][:n_test], "test_labels": cache["test_labels"][:n_test]}
    except Exception:  # torch raises several types for a torn or foreign file: extract again
        return None


def probe_report(run: Run, *, layer: str = "bottleneck", checkpoint: str = Checkpoint.LAST, protocol: str | None = None,
                 epochs: int = 200, lr: float = 1e-2, batch_size: int = 1024, limit: int | None = None,
                 device: str = "auto", seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Linear probe of a run's checkpoint, written to ``analysis/probe.json``.

    Extracts the features of ``layer`` for the training samples without augmentation (``train_eval``) and the
    test samples in eval mode, once per layer and checkpoint step (cached in ``analysis/features-<layer>-<step>.pt``;
    a later call reads them, and a cache of more samples serves a smaller ``limit``), then fits
    :func:`~lab.analysis.probing.protocol_probe`.

    Args:
        run: the run folder.
        layer: ``bottleneck`` or ``blocks.N``: the output of block N,
            ``forward_intermediates(x, intermediates_only=True)[N + 1]``, pooled to one vector per sample by
            :func:`pool_tokens` (token sequences: mean over tokens; conv maps: global average pool). The
            bottleneck is what the protocol reads: the last block's output pooled (``authors``) or the model's
            ``forward_features`` (``mae``).
        checkpoint: which checkpoint (``last`` or ``best``).
        protocol: ``authors`` or ``mae`` (:data:`~lab.analysis.probing.PROTOCOLS`); None: ``authors`` for an MAE
            pretraining run, ``mae`` for a classifier.
        epochs: probe epochs.
        lr: probe peak learning rate.
        batch_size: probe batch size.
        limit: at most this many samples of each split (a fixed shuffle's first ones, so every class is
            kept in proportion: :func:`~lab.train.pretrain_eval.features`); None for all.
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda[:i]``: where features are extracted and the
            probe is trained.
        seed: seed of the probe's shuffles.
        progress: a progress bar over feature extraction.

    Returns:
        What ``probe.json`` holds: ``top1``, ``top5``, ``k`` (the k of top-k, min(5, C)), ``train_top1``, ``loss``
        per epoch, ``protocol`` and ``protocol_source``, ``layer``, ``features_of`` (what was read), ``step``,
        ``checkpoint``, ``n_train``, ``n_test``, ``feature_dim``, ``num_classes``, ``epochs``, ``lr``,
        ``batch_size``, ``seed``, ``limit``, ``features`` (the cache file), ``cached``
        (whether it was read rather than extracted), ``extract_s`` and ``probe_s``.

    Raises:
        ValueError: an unknown layer, a block out of range (the message names the valid range), an unknown or
            unavailable device, bad probe settings.
        CheckpointError: the checkpoint is missing, corrupt, or does not fit the config's model.
        FileNotFoundError: the run's data are missing (:class:`~lab.data.images.DatasetNotFoundError`).
    """
    block = block_index(layer)
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"unknown probe protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    if epochs < 1 or batch_size < 2 or lr <= 0 or (limit is not None and limit < 2):
        raise ValueError(f"need epochs >= 1, batch_size >= 2, lr > 0 and limit >= 2; got epochs={epochs}, "
                         f"batch_size={batch_size}, lr={lr}, limit={limit}")
    try:
        dev = resolve_device(device)
    except RuntimeError as err:  # an unknown name, or CUDA asked for where there is none
        raise ValueError(f"device {device!r}: {err}") from None
    cfg = config_of_run(run)
    if cfg.train.task == "diffusion":
        raise ValueError(f"{run.path.name} is a diffusion run: its features depend on a noise level; "
                         "lab.reports.diffusion_probe probes it over (noise level, block)")
    cfg, model, data, step = load_trained(run, checkpoint, loader=True)
    spec = PROTOCOLS[protocol or ("authors" if cfg.train.task == "mae" else "mae")]
    if block is not None or spec.features == "last_block_mean":
        blocks = _num_blocks(model, data)
        if block is None:  # the authors' bottleneck: the last block's raw output, averaged over every token
            block = blocks - 1
        if block >= blocks:
            raise ValueError(f"layer {layer} is out of range: this {cfg.model.name} has {blocks} blocks, "
                             f"blocks.0 to blocks.{blocks - 1}")
    features_of = "forward_features" if block is None else f"blocks.{block} output, mean over tokens"
    n_train, n_test = (len(s) if limit is None else min(limit, len(s)) for s in (data.train_eval, data.test))
    path = run.analysis_path(layout.features_name("bottleneck" if block is None else f"blocks.{block}", step))
    fingerprint = _fingerprint(model)
    start = time.perf_counter()
    feats = _read_cache(path, fingerprint, n_train, n_test)
    cached = feats is not None
    if feats is None:
        model.to(dev)
        with tqdm(total=n_train + n_test, desc=f"features {layer}", unit="img", disable=not progress,
                  dynamic_ncols=True) as bar:
            extractor = _Extractor(model, block, bar)
            feats = {}
            for split, dataset, n in (("train", data.train_eval, n_train), ("test", data.test, n_test)):
                feats[split], feats[f"{split}_labels"] = features(extractor, dataset, limit=n, device=dev,
                                                                  workers=cfg.data.workers)
        buffer = io.BytesIO()
        torch.save({**feats, "fingerprint": fingerprint}, buffer)
        atomic_write_bytes(path, buffer.getvalue())
    extract_s = time.perf_counter() - start

    start = time.perf_counter()
    out = protocol_probe(feats["train"], feats["train_labels"], feats["test"], feats["test_labels"],
                         protocol=spec, epochs=epochs, lr=lr, batch_size=batch_size, num_classes=data.num_classes,
                         seed=seed, device=dev)
    summary: dict[str, Any] = {
        "top1": out["top1"], "top5": out["top5"], "k": out["k"], "train_top1": out["train_top1"],
        "protocol": spec.name, "protocol_source": spec.source, "layer": layer, "features_of": features_of,
        "step": step, "checkpoint": checkpoint, "n_train": n_train, "n_test": n_test,
        "feature_dim": int(feats["train"].shape[1]), "num_classes": data.num_classes, "epochs": epochs, "lr": lr,
        "batch_size": batch_size, "seed": seed, "limit": limit, "features": path.name, "cached": cached,
        "extract_s": round(extract_s, 3), "probe_s": round(time.perf_counter() - start, 3),
        "loss": [float(v) for v in out["loss"]],
    }
    atomic_write_json(run.analysis_path(layout.PROBE), summary)
    return summary


def format_probe(summary: dict[str, Any]) -> str:
    """The report as a short table for the terminal."""
    source = "read from cache" if summary["cached"] else "extracted"
    return "\n".join([
        f"Linear probe of {summary['layer']} ({summary['features_of']}) at step {summary['step']} "
        f"({summary['checkpoint']} checkpoint), protocol {summary['protocol']}",
        f"  {'top-1':<14}{summary['top1']:>8.4f}",
        f"  {'top-' + str(summary['k']):<14}{summary['top5']:>8.4f}",
        f"  {'train top-1':<14}{summary['train_top1']:>8.4f}",
        f"  {'n':<14}{summary['n_train']:>8} train, {summary['n_test']} test, {summary['feature_dim']} features, "
        f"{summary['num_classes']} classes",
        f"  features {source} ({summary['features']}, {summary['extract_s']:.1f} s); probe "
        f"{summary['epochs']} epochs, lr {summary['lr']:g}, batch {summary['batch_size']} ({summary['probe_s']:.1f} s)",
    ])
