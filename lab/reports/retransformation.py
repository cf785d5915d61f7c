"""Re-transformation across the residual steps of a run's network, written to ``analysis/retransformation.json``.

:func:`~lab.analysis.retransformation.retransformation` (*ResidualDroppath: Enhancing Feature Reuse over Residual
Connections*, Figure 3's measure, for any residual network) on the run's first test inputs, with the network seen as
its residual steps (:func:`~lab.nn.networks.residual_steps`: a ViT's attention and MLP sub-layers one step each).
"""

from __future__ import annotations

from typing import Any

import torch

from lab.analysis.retransformation import retransformation
from lab.hooks import eval_mode
from lab.nn.networks import residual_steps
from lab.reports.alignment import load_trained, plain
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runfolder.writes import atomic_write_json
from lab.runs.store import Run

__all__ = ["format_retransformation", "retransformation_report"]


def retransformation_report(run: Run, *, inputs: int = 256, checkpoint: str = Checkpoint.LAST) -> dict[str, Any]:
    """Re-transformation of a run's checkpoint at its first ``inputs`` test inputs, written to
    ``analysis/retransformation.json``.

    Returns:
        What the file holds: ``backtrack``, ``cka_backtrack`` (scalars), per layer ``to_input``, ``to_previous``,
        ``stage_start``, ``cka_to_input``, the ``cka`` matrix, and ``step``, ``inputs``, ``checkpoint``, ``steps``
        (the residual steps' names, in forward order).

    Raises:
        CheckpointError: the checkpoint is missing, corrupt or does not fit the model.
    """
    _, model, data, step = load_trained(run, checkpoint)
    model = residual_steps(model)
    x = data.x_test[:inputs]
    with torch.no_grad(), eval_mode(model):
        out = retransformation(model.forward_intermediates(x, intermediates_only=True))
    summary: dict[str, Any] = {key: plain(value) for key, value in out.items() if key != "inputs"}
    summary.update(step=step, inputs=len(x), checkpoint=checkpoint, steps=[name for name, _ in model.iter_blocks()])
    atomic_write_json(run.analysis_path(layout.RETRANSFORMATION), summary)
    return summary


def format_retransformation(summary: dict[str, Any]) -> str:
    """The report for the terminal: the two scalars, then each layer's distances and CKA to the input."""

    def num(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3g}"

    lines = [f"Re-transformation at step {summary['step']}: {summary['inputs']} test inputs, "
             f"{len(summary['steps'])} residual steps",
             f"  share of the distance path heading back to the input   {num(summary['backtrack']):>8}",
             f"  the same for 1 - CKA to the input                       {num(summary['cka_backtrack']):>8}",
             "  distance to the input by layer:  " + " ".join(num(v) for v in summary["to_input"]),
             "  change from the layer before:    " + " ".join(num(v) for v in summary["to_previous"]),
             "  linear CKA to the input:         " + " ".join(num(v) for v in summary["cka_to_input"])]
    return "\n".join(lines)
