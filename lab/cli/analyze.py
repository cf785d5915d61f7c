"""``analyze alignment|collapse|retransformation|rank RUN``: a run's checkpoint (or a network of the user's own,
``--model`` and ``--weights``) analysed into ``RUN/analysis/``.

For a network of the user's own, the table follows what the import did (:func:`imported_lines`): how the data were
made into the network's inputs, a head whose classes are not the data's, and with ``--strict false`` the tensors
that are not the file's but the network's initialisation."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

from lab.cli.report import report
from lab.reports.alignment import alignment_report, collapse_report, format_alignment
from lab.reports.layer_rank import format_layer_rank, layer_rank_report
from lab.reports.retransformation import format_retransformation, retransformation_report
from lab.runfolder import layout
from lab.runs.store import CheckpointError, Run, RunStore

LISTED = 10
"""The most tensors left at initialisation the output names (it gives the count of the rest)."""


def imported_lines(imported: dict[str, Any]) -> list[str]:
    """What the output says of an imported network before its analysis: its inputs, its head, the tensors that are
    not the file's (from the ``imported`` record of its config.json)."""
    lines = []
    if imported.get("inputs"):
        lines.append(f"inputs: {imported['inputs']}")
    head, classes = imported.get("head_classes"), imported.get("data_classes")
    if head is not None and classes is not None and head != classes:
        lines.append(f"head: {head} classes, the data {classes}: the network's head is not used for the data's "
                     "classes (the analyses read its features)")
    initialised = imported.get("initialised") or []
    if initialised:
        more = f" and {len(initialised) - LISTED} more" if len(initialised) > LISTED else ""
        lines.append(f"not from the file (--strict false), left at initialisation: {len(initialised)} tensors: "
                     f"{', '.join(initialised[:LISTED])}{more}")
    return lines


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``analyze``: 0 with the analysis written, 2 for a bad run, checkpoint or setting (nothing written: a network
    of the user's own whose analysis is refused leaves no run folder)."""
    if args.inputs < 2 or (args.k is not None and args.k < 1) or args.nc_inputs < 2 or args.ra4_from < 1:
        print("error: --inputs and --nc-inputs must be >= 2, --k and --ra4-from >= 1", file=sys.stderr)
        return 2

    def analysis(run: Run) -> tuple[str, str]:
        if args.analysis == "collapse":
            curve = collapse_report(run, nc_inputs=args.nc_inputs)["curve"]
            lines = [f"step {c['step']}: " + ", ".join(f"{k} {c[k]:.4g}" for k in ("nc1", "nc2_equinorm",
                                                                                    "nc2_maxangle", "nc3", "nc4")
                                                         if c[k] is not None) for c in curve]
            return "\n".join(lines), f"wrote {run.analysis_path(layout.COLLAPSE)}"
        if args.analysis == "rank":
            summary = layer_rank_report(run, points=args.inputs, checkpoint=args.checkpoint)
            return format_layer_rank(summary), f"wrote {run.analysis_path(layout.LAYER_RANK)}"
        if args.analysis == "retransformation":
            summary = retransformation_report(run, inputs=args.inputs, checkpoint=args.checkpoint)
            return format_retransformation(summary), f"wrote {run.analysis_path(layout.RETRANSFORMATION)}"
        summary = alignment_report(run, inputs=args.inputs, k=args.k, nc_inputs=args.nc_inputs,
                                   checkpoint=args.checkpoint, fit_start=args.ra4_from - 1, device=args.device,
                                   progress=not args.no_progress)
        return format_alignment(summary), (f"wrote {run.analysis_path(layout.ALIGNMENT)} and "
                                           f"{layout.ALIGNMENT_ARRAYS}")

    def measure(run: Run) -> tuple[str, str]:
        if getattr(args, "model", None) is None:
            return analysis(run)
        try:  # a network imported just now: what the import did, then its analysis
            for line in imported_lines(run.config_record().get("imported") or {}):
                print(line, flush=True)  # before the analysis starts: it may take minutes
            return analysis(run)
        except (FileNotFoundError, CheckpointError, ValueError):  # ConfigError and RunFolderError are ValueErrors
            shutil.rmtree(run.path, ignore_errors=True)  # refused: the folder made for it goes too
            raise

    return report(args, store, measure)
