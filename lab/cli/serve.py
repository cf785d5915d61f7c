"""``serve``: the lab's pages at ``http://127.0.0.1:PORT/apps``, as ``panel serve apps/`` serves them from a
checkout, until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from lab.runs.store import default_runs_dir


def run(args: argparse.Namespace) -> int:
    """``serve``: 0 after Ctrl-C or SIGTERM (every job stopped with its checkpoint), 2 for bad input."""
    if not 0 <= args.port <= 65535 or args.max_jobs < 1:
        print("error: --port must be in 0..65535 and --max-jobs >= 1", file=sys.stderr)
        return 2
    from lab.ui.serve import serve_lab  # here: the pages import Panel, HoloViews and Bokeh

    serve_lab(args.port, args.address, runs_dir=args.runs_dir or default_runs_dir(), max_jobs=args.max_jobs,
              processes=not args.threads, show=args.show)
    return 0
