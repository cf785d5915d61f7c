"""``probe RUN``: a linear probe on a run's frozen features (or a network of the user's own) into
``RUN/analysis/probe.json``; a diffusion run's, per block and noise level, into ``analysis/diffusion_probe.json``."""

from __future__ import annotations

import argparse
import sys

from lab.cli.report import report
from lab.config import config_of_run
from lab.reports.diffusion_probe import diffusion_probe_report, format_diffusion_probe
from lab.reports.probe import format_probe, probe_report
from lab.runfolder import layout
from lab.runs.store import Run, RunStore
from lab.train.pretrain_eval import PROBE_TIMES


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``probe``: 0 with the probe written, 2 for a bad run, checkpoint or setting (nothing written)."""
    if args.epochs < 1 or args.batch_size < 2 or args.lr <= 0 or (args.limit is not None and args.limit < 2):
        print("error: --epochs must be >= 1, --batch-size and --limit >= 2 and --lr > 0", file=sys.stderr)
        return 2

    def measure(run: Run) -> tuple[str, str]:
        wrote = f"wrote {run.analysis_path(layout.PROBE)}"
        if config_of_run(run).train.task == "diffusion":
            times = tuple(float(t) for t in args.noise_levels.split(",")) if args.noise_levels else PROBE_TIMES
            summary = diffusion_probe_report(run, times=times, checkpoint=args.checkpoint, epochs=args.epochs,
                                             lr=args.lr, batch_size=args.batch_size, limit=args.limit,
                                             device=args.device, protocol=args.protocol or "quick")
            return format_diffusion_probe(summary), f"wrote {run.analysis_path(layout.DIFFUSION_PROBE)}"
        summary = probe_report(run, layer=args.layer, checkpoint=args.checkpoint, protocol=args.protocol,
                               epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, limit=args.limit,
                               device=args.device, progress=not args.no_progress)
        return format_probe(summary), wrote

    return report(args, store, measure)
