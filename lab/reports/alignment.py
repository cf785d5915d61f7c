"""Analyses of a finished (or running) run, written into its folder: ``<run>/analysis/<name>.json`` and ``.npz``.

A report reads the run's config and a checkpoint (``weights_only=True``), rebuilds the data and model exactly as
training did, and writes its numbers beside the run, so a run trained on another machine is analysed the same way.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from lab.analysis.residual_alignment import (
    NC_KEYS,
    PAPER_K,
    RA4_FIT_START,
    SCALARS,
    alignment_reasons,
    collapse_of,
    residual_alignment,
)
from lab.analysis.token_jacobian import spread_positions
from lab.config import ExperimentConfig, config_of_run
from lab.data.toy2d import ToyData
from lab.nn.networks import residual_steps
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_bytes, atomic_write_json
from lab.runs.store import CheckpointError, Run
from lab.train.build import build_data, build_model, loader_data
from lab.train.checkpoint import load_checkpoint
from lab.train.core import resolve_device
from lab.train.loader import LoaderData


def load_trained(run: Run, checkpoint: str = Checkpoint.LAST, *, loader: bool = False, weights: str = "model"
                 ) -> tuple[ExperimentConfig, nn.Module, ToyData | LoaderData, int]:
    """The run's config, its model with the checkpoint's weights (eval mode, CPU), its data and the checkpoint's
    step.

    Args:
        run: the run folder.
        checkpoint: ``last`` or ``best``.
        loader: the data as the loader engine reads it (:func:`~lab.train.build.loader_data`: an image folder
            file by file) rather than as whole tensors (:func:`~lab.train.build.build_data`).
        weights: ``model`` (the trained weights) or ``ema`` (their moving average, ``train.ema``).

    Raises:
        CheckpointError: the checkpoint is missing, corrupt, holds no such weights, or does not fit the model.
    """
    cfg = config_of_run(run)
    data = loader_data(cfg) if loader else build_data(cfg)
    model = build_model(cfg, data)
    state = load_checkpoint(run, checkpoint)
    if weights not in state:
        raise CheckpointError(f"checkpoint {run.checkpoint_path(checkpoint)} holds no {weights!r} weights"
                              + (" (the run was trained without train.ema)" if weights == "ema" else ""))
    try:
        model.load_state_dict(state[weights])
    except (KeyError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {run.checkpoint_path(checkpoint)} does not fit the run's model: "
                              f"{err}") from None
    return cfg, model.eval(), data, int(state.get("step", 0))


def plain(value: np.ndarray) -> Any:
    """JSON value of a result array: numbers (NaN as null) or nested lists."""
    if value.ndim == 0:
        v = value.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return [plain(v) for v in value]


def alignment_report(run: Run, *, inputs: int = 64, k: int | None = None, nc_inputs: int = 500,
                     checkpoint: str = Checkpoint.LAST, fit_start: int = RA4_FIT_START, seed: int = 0,
                     device: str = "cpu", progress: bool | Callable[[int, int], None] = False) -> dict[str, Any]:
    """RA1–RA4 and NC1–NC4 of a run's checkpoint, written to ``analysis/alignment.json`` and ``alignment.npz``.

    Args:
        run: the run folder.
        inputs: test inputs analysed (the first ones of the test split).
        k: singular triplets per block (default 30, as the paper's Fig. 2; capped at the Jacobians' size).
        nc_inputs: training inputs for neural collapse.
        checkpoint: which checkpoint (``last`` or ``best``).
        fit_start: first block (0-based) of RA4's 1/σ₁ fit (default 4: from block 5, as the paper's Fig. 4b).
        seed: seed of the random baseline and directions.
        device: where the Jacobians are computed: ``cpu``, ``cuda[:i]`` or ``auto`` (CUDA when present).
        progress: a progress bar of the Jacobians done (tqdm, on stderr), or ``progress(done, total)`` to feed one.

    Returns:
        What ``alignment.json`` holds: the scalars of :data:`~lab.analysis.residual_alignment.SCALARS`, then per
        layer ``sigma1``, ``inv_sigma``, ``inv_sigma_fit``, ``baseline``, the NC keys
        (:data:`~lab.analysis.residual_alignment.NC_KEYS`), and ``step``, ``inputs``, ``k``, ``num_classes``,
        ``checkpoint``, ``positions`` (a language model's token positions, 0-based; None otherwise), ``ra4_from``
        (the first block asked for), ``ra4_fit_from`` and ``ra4_fit_to`` (the blocks
        fitted, 1-based, within one stage),
        ``align_offdiag_ci`` and ``baseline_ci`` (95 % intervals over inputs and over the random draws),
        ``ra2_pairs`` (the block pairs the score averages), ``stage`` (each state's stage), ``ra1_stage`` (the
        stage RA1's headline measures, 1-based), ``straightness_by_stage``, ``spacing_cv_by_stage`` and
        ``reasons`` (why a number is n/a, :func:`~lab.analysis.residual_alignment.alignment_reasons`).
    """
    _, model, data, step = load_trained(run, checkpoint)
    try:
        dev = resolve_device(device)
    except RuntimeError as err:  # an unknown name, or CUDA asked for where there is none
        raise ValueError(f"device {device!r}: {err}") from None
    model = residual_steps(model).to(dev)  # a ViT's attention and MLP: one residual step each
    x, y = data.x_test[:inputs].to(dev), data.y_test[:inputs].to(dev)
    sequence = getattr(model, "causal", False)  # a language model: token by token, without classes
    positions = spread_positions(x.shape[1]) if sequence else None
    C = 0 if sequence else data.num_classes
    with torch.no_grad():
        states = model.forward_intermediates(x[:1], intermediates_only=True)
    width = min(v.shape[-1] if sequence else v.numel() for v in states)
    k = min(k or PAPER_K, width)
    with tqdm(unit="Jacobian", desc="Residual Alignment", disable=progress is not True, leave=False) as bar:
        def feed(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        out = residual_alignment(model, x, y, k, nc_x=data.x_train[:nc_inputs].to(dev),
                                 nc_y=data.y_train[:nc_inputs].to(dev), num_classes=C, fit_start=fit_start,
                                 seed=seed, positions=positions, progress=progress if callable(progress) else feed)
    summary: dict[str, Any] = {key: plain(out[key]) for key in SCALARS}
    summary.update(sigma1=plain(out["sigma"][:, 0]), inv_sigma=plain(out["inv_sigma"]),
                   inv_sigma_fit=plain(out["inv_sigma_fit"]), baseline=plain(out["baseline"]),
                   **{key: plain(out[key]) for key in NC_KEYS},
                   step=step, inputs=len(x), k=k, num_classes=C, checkpoint=checkpoint, positions=positions,
                   ra4_from=int(out["fit_asked"]) + 1, ra4_fit_from=int(out["fit_start"]) + 1,
                   ra4_fit_to=int(out["fit_stop"]),
                   align_offdiag_ci=plain(out["align_offdiag_ci"]), baseline_ci=plain(out["baseline_ci"]),
                   ra2_pairs=int(out["ra2_pairs"]), stage=plain(out["stage"]), ra1_stage=int(out["ra1_stage"]) + 1,
                   straightness_by_stage=plain(out["straightness_by_stage"]),
                   spacing_cv_by_stage=plain(out["spacing_cv_by_stage"]), reasons=alignment_reasons(out))
    atomic_write_json(run.analysis_path(layout.ALIGNMENT), summary)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **out)
    atomic_write_bytes(run.analysis_path(layout.ALIGNMENT_ARRAYS), buffer.getvalue())
    return summary


def collapse_report(run: Run, *, nc_inputs: int = 500) -> dict[str, Any]:
    """NC1–NC4 of the last layer (the head as classifier) of the network at initialisation (rebuilt from the run's
    config and seed), at every checkpoint the run kept (``train.save_every``) and at ``last``, on its first
    ``nc_inputs`` training inputs: neural collapse over training, as *Residual Alignment*'s Figure 7 follows it.
    Written to ``analysis/collapse.json``.

    Returns:
        ``curve``: one ``{"step": …, <NC key>: value}`` per checkpoint, by step (NaN as None); ``nc_inputs``.

    Raises:
        CheckpointError: a checkpoint is missing, corrupt or does not fit the model.
    """
    cfg = config_of_run(run)
    data = build_data(cfg)
    x, y = data.x_train[:nc_inputs], data.y_train[:nc_inputs]

    def point(model: nn.Module, step: int) -> dict[str, Any]:
        nc = collapse_of(model.eval(), x, y, num_classes=data.num_classes)
        return {"step": step, **{key: plain(values[-1]) for key, values in nc.items()}}

    curve = {0: point(build_model(cfg, data), 0)}  # the network at initialisation (cfg.model.seed), where it starts
    for name in [*run.saved_checkpoints(), Checkpoint.LAST]:
        _, model, _, step = load_trained(run, name)
        curve[step] = point(model, step)
    summary = {"curve": [curve[s] for s in sorted(curve)], "nc_inputs": len(x)}
    atomic_write_json(run.analysis_path(layout.COLLAPSE), summary)
    return summary


def format_alignment(summary: dict[str, Any]) -> str:
    """The report as a table for the terminal: one line per scalar (an interval where there is one, the reason
    where a number is n/a), RA1 by stage, then 1/σ₁ and NC1 by block."""
    fit_from, fit_to = summary["ra4_fit_from"], summary.get("ra4_fit_to", len(summary["inv_sigma"]))
    pairs = summary.get("ra2_pairs")
    names = {"align_offdiag": "RA2 alignment score, i != j (mean)" + (f" over {pairs} pairs" if pairs else ""),
             "baseline_mean": "  random-basis baseline (about 1/K)",
             "topk_ratio": "RA3 mean top-C sigma / mean next-C sigma",
             "inv_sigma1_slope": (f"RA4 1/sigma_1 slope, blocks {fit_from}-{fit_to}" if fit_to - fit_from >= 1 else
                                  f"RA4 1/sigma_1 slope from block {summary.get('ra4_from', fit_from)}"),
             "inv_sigma1_r2": "RA4 1/sigma_1 fit R^2",
             "straightness": "RA1 trajectory straightness (1 = line)", "spacing_cv": "RA1 step-length CV (0 = equal)"}
    intervals = {"align_offdiag": "align_offdiag_ci", "baseline_mean": "baseline_ci"}
    reasons = summary.get("reasons", {})

    def num(v: Any) -> str:
        return "n/a" if v is None else f"{v:.4g}"

    positions = summary.get("positions")
    at = f" at token positions {', '.join(str(p + 1) for p in positions)}" if positions else ""
    lines = [f"Residual Alignment at step {summary['step']}: {summary['inputs']} test inputs{at}, K = {summary['k']}, "
             f"C = {summary['num_classes'] or 'none'}"]
    for key in SCALARS:
        ci = summary.get(intervals.get(key, ""))
        line = f"  {names[key]:<46}{num(summary[key]):>10}"
        if ci and None not in ci:
            line += f"  [{num(ci[0])}, {num(ci[1])}]"
        if summary[key] is None and key in reasons:
            line += f"  ({reasons[key]})"
        lines.append(line)
    if "straightness_by_stage" in summary and len(summary["straightness_by_stage"]) > 1:
        lines.append(f"  RA1 by stage (headline: stage {summary['ra1_stage']}): " + ", ".join(
            f"{s + 1}: {num(a)} / {num(b)}" for s, (a, b) in
            enumerate(zip(summary["straightness_by_stage"], summary["spacing_cv_by_stage"], strict=True))))
    lines.append("  1/sigma_1 by block: " + " ".join(num(v) for v in summary["inv_sigma"]))
    lines.append("  NC1 by layer:       " + " ".join(num(v) for v in summary["nc1"]))
    last = {key: summary[key][-1] for key in NC_KEYS}
    lines.append("  last layer: " + ", ".join(f"{key} {num(v)}" for key, v in last.items()))
    return "\n".join(lines)
