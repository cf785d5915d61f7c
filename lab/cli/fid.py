"""``fid RUN --reference DIR|digits``: the Fréchet distance of a diffusion run's samples from reference images
(FID, or digits-FD), appended to ``RUN/analysis/fid.json``; ``--select best`` scores every kept checkpoint first."""

from __future__ import annotations

import argparse

from lab.cli.report import report
from lab.reports.fid import fid_report, fid_select_best, format_fid
from lab.runfolder import layout
from lab.runfolder.layout import Checkpoint
from lab.runs.store import Run, RunStore


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``fid``: 0 with the measurement appended, 2 for a bad run, checkpoint or setting (nothing written)."""
    def measure(run: Run) -> tuple[str, str]:
        settings = dict(reference=args.reference, features=args.features, steps=args.steps, sampler=args.sampler,
                        guidance=args.guidance, ema=args.ema, inception_weights=args.inception_weights,
                        reference_limit=args.reference_limit, seed=args.seed, device=args.device,
                        progress=not args.no_progress)
        if args.select == Checkpoint.BEST:
            measurement = fid_select_best(run, num=args.num, select_num=args.select_num, **settings)
        else:
            measurement = fid_report(run, num=args.num, checkpoint=args.checkpoint, **settings)
        return format_fid(measurement), f"appended to {run.analysis_path(layout.FID)}"

    return report(args, store, measure)
