"""``analyze alignment|collapse|retransformation|rank RUN``: a run's checkpoint (or a network of the user's own,
``--model`` and ``--weights``) analysed into ``RUN/analysis/``."""

from __future__ import annotations

import argparse
import sys

from lab.cli.report import report
from lab.reports.alignment import alignment_report, collapse_report, format_alignment
from lab.reports.layer_rank import format_layer_rank, layer_rank_report
from lab.reports.retransformation import format_retransformation, retransformation_report
from lab.runfolder import layout
from lab.runs.store import Run, RunStore


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``analyze``: 0 with the analysis written, 2 for a bad run, checkpoint or setting (nothing written)."""
    if args.inputs < 2 or (args.k is not None and args.k < 1) or args.nc_inputs < 2 or args.ra4_from < 1:
        print("error: --inputs and --nc-inputs must be >= 2, --k and --ra4-from >= 1", file=sys.stderr)
        return 2

    def measure(run: Run) -> tuple[str, str]:
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

    return report(args, store, measure)
