"""Linear probes of a diffusion run's features over (block, noise level), written to
``<run>/analysis/diffusion_probe.json``.

*Residual Connections Harm Generative Representation Learning* (§5, Table 4) probes a diffusion model's frozen
features with a linear classifier and reports "the best configurations, including the choices of layer index and
noise level". Here every block's output is averaged over its tokens, on held-out and training images noised to each
level t of the VP-SDE (:func:`lab.train.pretrain_eval.diffusion_features`), and a linear probe is trained on each
cell of that grid. A best cell picked on the test split would be the best of dozens of chances on the numbers it
reports, so the choice is made on a validation split held out of the training images (:data:`VALIDATION`): the grid
is the validation accuracy, and the test split scores only the chosen cells, each probe then trained on all the
training images. Two cells are reported: the best one, and the best among the deepest third of the blocks
(``deep_*``), where the decayed shortcuts of that paper (smallest α at the decoder's end) act most — the best cell of
a small model often sits at its first block, where α is about 1 in every arm.

Probes follow one of :data:`PROTOCOLS`: ``quick`` (standardised features, AdamW at a constant rate, the settings
given) or ``authors``, the paper's Appendix A.2 protocol as its released code runs it (200 epochs, batch 1024, lr
1e-2 with cosine decay to 0, no augmentation: :data:`lab.analysis.probing.PROTOCOLS`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from lab.analysis.probing import linear_probe, protocol_probe
from lab.config import config_of_run
from lab.reports.alignment import load_trained
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_json
from lab.runs.store import Run
from lab.train.core import resolve_device
from lab.train.pretrain_eval import PROBE_TIMES, diffusion_features

VALIDATION = 0.2
"""The share of the training images held out to choose the probed cells."""
DEEP = 1 / 3
"""The deepest share of the blocks the ``deep`` cell is chosen from."""
PROTOCOLS = {"quick": "standardised features, AdamW at a constant learning rate, the epochs, rate and batch given",
             "authors": "the paper's Appendix A.2 probe as its released code runs it: 200 epochs, batch 1024, lr 1e-2 "
                        "with cosine decay to 0, AdamW, no augmentation"}


def _probe(protocol: str, epochs: int, lr: float, batch_size: int, seed: int, device: torch.device):
    """``probe(xtr, ytr, xte, yte, C) -> test accuracy`` of the protocol."""
    if protocol == "authors":
        return lambda xtr, ytr, xte, yte, C: float(protocol_probe(
            xtr, ytr, xte, yte, protocol="authors", epochs=200, lr=1e-2, batch_size=1024, num_classes=C, seed=seed,
            device=device)["top1"])
    return lambda xtr, ytr, xte, yte, C: float(linear_probe(
        xtr, ytr, xte, yte, epochs=epochs, lr=lr, batch_size=batch_size, num_classes=C, seed=seed,
        device=device)["test_acc"])


def diffusion_probe_report(run: Run, *, times: tuple[float, ...] = PROBE_TIMES, checkpoint: str = Checkpoint.LAST,
                           ema: bool | None = None, epochs: int = 100, lr: float = 1e-2, batch_size: int = 256,
                           limit: int | None = None, seed: int = 0, device: str = "auto",
                           protocol: str = "quick") -> dict[str, Any]:
    """Probe every (noise level, block) of a diffusion run's checkpoint; write ``analysis/diffusion_probe.json``.

    Args:
        run: a run of ``train.task=diffusion``.
        times: noise levels t ∈ (0, 1].
        checkpoint: ``last`` or ``best``.
        ema: probe the weights' moving average; None: when the run kept one.
        epochs: probe epochs per cell (``quick``).
        lr: probe learning rate (``quick``; AdamW).
        batch_size: probe batch size (``quick``).
        limit: at most this many samples of each split.
        seed: the noise of the images, the validation split and the probes' shuffles.
        device: ``auto``, ``cpu`` or ``cuda[:i]``.
        protocol: one of :data:`PROTOCOLS`.

    Returns:
        The summary written: ``top1`` (test accuracy of the cell chosen on validation), ``block`` and ``t`` of that
        cell; ``deep_top1``, ``deep_block``, ``deep_t`` for the best of the deepest blocks (:data:`DEEP`); ``grid``
        (``[len(times)][blocks]`` validation accuracies), ``blocks`` (their names), ``times``, ``protocol`` and the
        settings.
    """
    if not times or any(not 0.0 < t <= 1.0 for t in times):
        raise ValueError(f"noise levels must lie in (0, 1]; got {list(times)}")
    if epochs < 1 or batch_size < 2 or lr <= 0 or (limit is not None and limit < 10):
        raise ValueError(f"need epochs >= 1, batch_size >= 2, lr > 0 and limit >= 10; got epochs={epochs}, "
                         f"batch_size={batch_size}, lr={lr}, limit={limit}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown probe protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    cfg = config_of_run(run)
    if cfg.train.task != "diffusion":
        raise ValueError(f"{run.path.name} trained train.task={cfg.train.task}, not a diffusion model")
    try:
        dev = resolve_device(device)
    except RuntimeError as err:
        raise ValueError(f"device {device!r}: {err}") from None
    weights = "ema" if (cfg.train.ema > 0 if ema is None else ema) else "model"
    _, model, data, step = load_trained(run, checkpoint, loader=True, weights=weights)
    model.to(dev)
    start = time.perf_counter()
    (xtr, ytr), (xte, yte) = (diffusion_features(model, d, tuple(times), limit=limit, seed=seed, device=dev,
                                                 workers=cfg.data.workers) for d in (data.train_eval, data.test))
    extract_s = time.perf_counter() - start
    start = time.perf_counter()
    order = torch.randperm(xtr.shape[2], generator=torch.Generator().manual_seed(seed))
    n_val = max(1, round(VALIDATION * len(order)))
    fit, val = order[n_val:], order[:n_val]
    probe, C = _probe(protocol, epochs, lr, batch_size, seed, dev), data.num_classes
    grid = torch.tensor([[probe(xtr[i, j][fit], ytr[fit], xtr[i, j][val], ytr[val], C) for j in range(xtr.shape[1])]
                         for i in range(xtr.shape[0])])
    blocks = [name for name, _ in model.iter_blocks()]
    first_deep = min(len(blocks) - 1, int(len(blocks) * (1 - DEEP)))

    def chosen(columns: slice) -> tuple[int, int, float]:
        part = grid[:, columns]
        i, j = divmod(int(part.argmax()), part.shape[1])
        j += columns.start or 0
        return i, j, probe(xtr[i, j], ytr, xte[i, j], yte, C)

    i, j, top1 = chosen(slice(None))
    di, dj, deep = chosen(slice(first_deep, None))
    summary: dict[str, Any] = {
        "kind": "diffusion", "top1": top1, "block": blocks[j], "t": float(times[i]),
        "deep_top1": deep, "deep_block": blocks[dj], "deep_t": float(times[di]), "deep_blocks": blocks[first_deep:],
        "grid": grid.tolist(), "grid_of": "validation accuracy (the cells are chosen on it)", "blocks": blocks,
        "times": [float(t) for t in times], "protocol": protocol, "protocol_text": PROTOCOLS[protocol],
        "features_of": "each block's output, mean over tokens, of x_t noised with one ε per image",
        "step": step, "checkpoint": checkpoint, "weights": weights, "n_train": len(fit), "n_val": len(val),
        "n_test": int(xte.shape[2]), "num_classes": C, "epochs": epochs, "lr": lr, "batch_size": batch_size,
        "limit": limit, "seed": seed, "extract_s": round(extract_s, 3),
        "probe_s": round(time.perf_counter() - start, 3),
    }
    atomic_write_json(run.analysis_path(layout.DIFFUSION_PROBE), summary)
    return summary


def format_diffusion_probe(summary: dict[str, Any]) -> str:
    """The grid as a table (noise levels down, blocks across) and the best cell."""
    blocks = [b.replace("net.", "").replace("_blocks", "").replace("mid_block", "mid") for b in summary["blocks"]]
    width = max(6, *(len(b) for b in blocks))
    lines = [f"Linear probes ({summary['protocol']}) of step {summary['step']} ({summary['weights']} weights): "
             f"{summary['n_train']} train, {summary['n_val']} validation, {summary['n_test']} test, block outputs "
             "averaged over tokens; validation accuracy:",
             "t       " + " ".join(f"{b:>{width}}" for b in blocks)]
    for t, row in zip(summary["times"], summary["grid"], strict=True):
        lines.append(f"{t:<7g} " + " ".join(f"{v:>{width}.4f}" for v in row))
    lines.append(f"best: {summary['top1']:.4f} on test at {summary['block']}, t = {summary['t']:g} (chosen on "
                 "validation)")
    lines.append(f"deepest blocks: {summary['deep_top1']:.4f} on test at {summary['deep_block']}, "
                 f"t = {summary['deep_t']:g}")
    return "\n".join(lines)
