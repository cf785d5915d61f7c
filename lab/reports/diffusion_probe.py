"""Linear probes of a diffusion run's features over (block, noise level), written to ``<run>/analysis/probe.json``.

*Residual Connections Harm Generative Representation Learning* (§5, Table 4) probes a diffusion model's frozen
features with a linear classifier and reports "the best configurations, including the choices of layer index and
noise level". Here every block's output is averaged over its tokens, on held-out and training images noised to each
level t of the VP-SDE (:func:`lab.train.pretrain_eval.diffusion_features`), and a linear probe is trained on each
cell of that grid; the report keeps the whole grid and names the best cell.
"""

from __future__ import annotations

import time
from typing import Any

from lab.reports.alignment import load_trained
from lab.runs import layout
from lab.runs.store import Run, atomic_write_json, config_of_run
from lab.train.core import resolve_device
from lab.train.pretrain_eval import PROBE_TIMES, diffusion_features, probe_grid


def diffusion_probe_report(run: Run, *, times: tuple[float, ...] = PROBE_TIMES, checkpoint: str = "last",
                           ema: bool | None = None, epochs: int = 100, lr: float = 1e-2, batch_size: int = 256,
                           limit: int | None = None, seed: int = 0, device: str = "auto") -> dict[str, Any]:
    """Probe every (noise level, block) of a diffusion run's checkpoint; write ``analysis/probe.json``.

    Args:
        run: a run of ``train.task=diffusion``.
        times: noise levels t ∈ (0, 1].
        checkpoint: ``last`` or ``best``.
        ema: probe the weights' moving average; None: when the run kept one.
        epochs: probe epochs per cell.
        lr: probe learning rate (AdamW).
        batch_size: probe batch size.
        limit: at most this many samples of each split.
        seed: the noise of the images and the probes' shuffles.
        device: ``auto``, ``cpu`` or ``cuda[:i]``.

    Returns:
        The summary written: ``top1`` (the best cell's test accuracy), ``block`` and ``t`` of that cell, ``grid``
        (``[len(times)][blocks]`` accuracies), ``blocks`` (their names), ``times``, and the settings.
    """
    if not times or any(not 0.0 < t <= 1.0 for t in times):
        raise ValueError(f"noise levels must lie in (0, 1]; got {list(times)}")
    if epochs < 1 or batch_size < 2 or lr <= 0 or (limit is not None and limit < 2):
        raise ValueError(f"need epochs >= 1, batch_size >= 2, lr > 0 and limit >= 2; got epochs={epochs}, "
                         f"batch_size={batch_size}, lr={lr}, limit={limit}")
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
    train, test = (diffusion_features(model, d, tuple(times), limit=limit, seed=seed, device=dev,
                                      workers=cfg.data.workers) for d in (data.train_eval, data.test))
    extract_s = time.perf_counter() - start
    start = time.perf_counter()
    grid = probe_grid(train, test, data.num_classes, epochs=epochs, seed=seed, lr=lr, batch_size=batch_size,
                      device=dev)
    i, j = divmod(int(grid.argmax()), grid.shape[1])
    blocks = [name for name, _ in model.iter_blocks()]
    summary: dict[str, Any] = {
        "kind": "diffusion", "top1": float(grid[i, j]), "block": blocks[j], "t": float(times[i]),
        "grid": grid.tolist(), "blocks": blocks, "times": [float(t) for t in times],
        "features_of": "each block's output, mean over tokens, of x_t noised with one ε per image",
        "step": step, "checkpoint": checkpoint, "weights": weights, "n_train": int(train[0].shape[2]),
        "n_test": int(test[0].shape[2]), "num_classes": data.num_classes, "epochs": epochs, "lr": lr,
        "batch_size": batch_size, "limit": limit, "seed": seed, "extract_s": round(extract_s, 3),
        "probe_s": round(time.perf_counter() - start, 3),
    }
    atomic_write_json(run.path / layout.ANALYSIS / "probe.json", summary)
    return summary


def format_diffusion_probe(summary: dict[str, Any]) -> str:
    """The grid as a table (noise levels down, blocks across) and the best cell."""
    blocks = [b.replace("net.", "").replace("_blocks", "").replace("mid_block", "mid") for b in summary["blocks"]]
    width = max(6, *(len(b) for b in blocks))
    lines = [f"Linear probes of step {summary['step']} ({summary['weights']} weights): {summary['n_train']} train, "
             f"{summary['n_test']} test, block outputs averaged over tokens",
             "t       " + " ".join(f"{b:>{width}}" for b in blocks)]
    for t, row in zip(summary["times"], summary["grid"], strict=True):
        lines.append(f"{t:<7g} " + " ".join(f"{v:>{width}.4f}" for v in row))
    lines.append(f"best: {summary['top1']:.4f} at {summary['block']}, t = {summary['t']:g}")
    return "\n".join(lines)
