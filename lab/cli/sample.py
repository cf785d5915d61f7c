"""``sample RUN``: images drawn from a diffusion run into ``RUN/analysis/samples-*.png`` and ``.npz``."""

from __future__ import annotations

import argparse

from lab.cli.report import report
from lab.reports.samples import format_samples, sample_report
from lab.runs.store import Run, RunStore


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``sample``: 0 with the samples written, 2 for a bad run, checkpoint or setting (nothing written)."""
    def measure(run: Run) -> tuple[str, str]:
        summary = sample_report(run, num=args.num, steps=args.steps, sampler=args.sampler, guidance=args.guidance,
                                checkpoint=args.checkpoint, ema=args.ema, seed=args.seed, device=args.device,
                                progress=not args.no_progress)
        return format_samples(summary), f"wrote {summary['png']} and {summary['npz'].name}"

    return report(args, store, measure)
