"""Feature rank and linear decodability at every layer of a run's network, written to ``analysis/layer_rank.json``.

*Residual Connections Harm Generative Representation Learning* (§6, its Eq. 6) relates how low-rank a network's
features are to how well a linear probe reads them. The Rank page measures that live on its sweeps of residual MLPs;
this report measures it on any network, a run's or one imported from a weights file: at h_0 … h_L (the network seen as
its residual steps, :func:`~lab.nn.networks.residual_steps`), :func:`~lab.analysis.rank_sweep.layer_rank_metrics` on
the run's first ``points`` training and test inputs. A layer is read as a linear rule reads it: conv features
averaged over space ``[n, C]``, a ViT's tokens averaged ``[n, D]``, vectors as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from lab.analysis.rank_sweep import layer_rank_metrics
from lab.hooks import eval_mode
from lab.nn.networks import residual_steps
from lab.reports.alignment import load_trained, plain
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_json
from lab.runs.store import Run

__all__ = ["format_layer_rank", "layer_features", "layer_rank_report"]

BATCH = 128
"""Inputs per forward pass: the features are pooled batch by batch, so a large network's stream is never all held."""


def layer_features(model: nn.Module, x: Tensor, batch: int = BATCH) -> list[Tensor]:
    """Every state h_0 … h_L at inputs ``x`` as a linear rule reads it, ``[N, width_l]`` each (eval mode, no grad):
    a feature map averaged over its positions, a token stream over its tokens — a language model's (``causal``) at
    its last token instead, the state that predicts the next token (its features, and its label's)."""
    causal = getattr(model, "causal", False)
    batches = []  # per batch, its pooled states
    with torch.no_grad(), eval_mode(model):
        for start in range(0, len(x), batch):
            states = model.forward_intermediates(x[start:start + batch], intermediates_only=True)
            batches.append([h.mean(dim=(2, 3)) if h.ndim == 4 else (h[:, -1] if causal else h.mean(dim=1))
                            if h.ndim == 3 else h.flatten(1) for h in states])
    return [torch.cat(layer) for layer in zip(*batches, strict=True)]


def layer_rank_report(run: Run, *, points: int = 512, checkpoint: str = Checkpoint.LAST) -> dict[str, Any]:
    """Rank and probe accuracy at every layer of a run's checkpoint, written to ``analysis/layer_rank.json``.

    Returns:
        What the file holds: per layer, Eq. 6's measures first — ``eq6_entropy`` (the entropy H, in nats, of the
        spectrum of the sample-by-sample covariance, the number the paper plots) and ``eq6_rank`` (exp(H) of that
        spectrum) — then ``effective_rank`` (Roy & Vetterli's exp(H) of the *uncentred* feature matrix ``[n, D]``'s
        singular values, another matrix: the two ranks differ), ``probe_acc``, ``width``; ``steps``
        (the residual steps' names), ``step``, ``points`` (training and test inputs each), ``checkpoint``.

    Raises:
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
    """
    _, model, data, step = load_trained(run, checkpoint)
    model = residual_steps(model)
    x_train, y_train = data.x_train[:points], data.y_train[:points]
    x_test, y_test = data.x_test[:points], data.y_test[:points]
    out = layer_rank_metrics(layer_features(model, x_train), y_train, layer_features(model, x_test), y_test,
                             num_classes=data.num_classes)
    out = {"eq6_entropy": out["eq6_entropy"], "eq6_rank": np.exp(out["eq6_entropy"]), **out}
    summary: dict[str, Any] = {key: plain(value) for key, value in out.items()}
    summary.update(steps=[name for name, _ in model.iter_blocks()], step=step, points=len(x_test),
                   checkpoint=checkpoint)
    atomic_write_json(run.analysis_path(layout.LAYER_RANK), summary)
    return summary


def format_layer_rank(summary: dict[str, Any]) -> str:
    """The report for the terminal: each measure by layer, named for the matrix it is taken on, Eq. 6's first."""

    def row(key: str) -> str:
        return " ".join("n/a" if v is None else f"{v:.3g}" for v in summary[key])

    return "\n".join([f"Rank by layer at step {summary['step']}: {summary['points']} test inputs, "
                      f"{len(summary['steps'])} residual steps",
                      f"  Eq. 6 entropy H of the sample covariance's spectrum (nats): {row('eq6_entropy')}",
                      f"  Eq. 6 rank exp(H), the same spectrum:                       {row('eq6_rank')}",
                      f"  effective rank of the uncentred features [n, D]:            {row('effective_rank')}",
                      f"  ridge probe accuracy:                                       {row('probe_acc')}"])
