"""``throughput mae|uvit``: images per second of the MAE's or the U-ViT's training step on this device; ``--record
FILE`` keeps the fastest rate for ``reproduce --dry-run``'s GPU-hours."""

from __future__ import annotations

import argparse
import sys

from lab.config import ConfigError
from lab.reproduce.throughput import Settings, defaults, measure, text_table


def run(args: argparse.Namespace) -> int:
    """``throughput``: prints the table; 2 for bad input."""
    if min(v for v in (args.batch, args.steps, args.repeats, args.workers) if v is not None) < 1:
        print("error: --batch, --steps, --repeats and --workers must be >= 1", file=sys.stderr)
        return 2
    base = defaults(args.what)
    settings = Settings(args.model or base.model, args.batch or base.batch, args.steps or base.steps, args.repeats,
                        args.compile, args.data, args.workers)
    try:
        head, rows = measure(args.what, settings, args.record)
    except (ConfigError, ValueError) as err:  # an unknown model, a model of another kind
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(head)
    print(text_table(["what", "images/s", "× plain"], rows))
    return 0
