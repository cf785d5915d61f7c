"""``reproduce``: the papers' claims measured and judged into ``OUT/report.html``, ``report.md`` and ``claims.json``;
on toy models here (``--budget smoke|cpu``), or at full scale (``gpu``, ``gpu1``, ``gpu-test``: plan, launch or
continue, collect)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lab.config import ConfigError
from lab.jobs.submit import Resources
from lab.reproduce import PAPERS, TOY_BUDGETS, reproduce, reproduce_at_scale
from lab.reproduce.claims import ERROR, MAX_SEEDS, Result
from lab.reproduce.collect import collect
from lab.reproduce.estimate import device_kind, read_throughput
from lab.reproduce.launch import PlanMismatch, failures
from lab.reproduce.plan import make_plan, parse_data, plan_text
from lab.runfolder import layout
from lab.runfolder.entries import EntryError
from lab.runfolder.lock import RunLocked
from lab.runs.store import RunStore


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``reproduce``: 0 when the report was written (whatever the verdicts), 1 when an experiment or a run failed
    (the report is written and names it), 2 for bad input; at full scale with ``--dry-run`` or ``--executor slurm``,
    0 once planned or submitted."""
    if args.seeds is not None and not 1 <= args.seeds <= MAX_SEEDS:
        print(f"error: --seeds must be between 1 and {MAX_SEEDS}", file=sys.stderr)
        return 2
    if args.collect:
        try:
            results, paths = collect(args.collect)
        except (FileNotFoundError, ValueError) as err:  # no reproduce.json there, or not a reproduction's
            print(f"error: {err}", file=sys.stderr)
            return 2
        return _report(results, paths)
    if args.budget not in TOY_BUDGETS:
        return _at_scale(args, store)
    out = Path(args.out) if args.out else store.root / time.strftime("reproduce-%Y%m%d-%H%M%S")
    if (out / "claims.json").exists():
        print(f"error: {out} holds a reproduction already; choose another --out", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print(f"error: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    return _report(*reproduce(out, papers=args.paper or list(PAPERS), budget=args.budget, seeds=args.seeds,
                              progress=not args.no_progress, workers=args.workers))


def _report(results: list[Result], paths: dict[str, Path]) -> int:
    """Print each claim's verdict and where the report is; 1 when an experiment failed."""
    width = max(len(r.claim.id) for r in results)
    for r in results:
        print(f"{r.claim.id:<{width}}  {r.verdict:<15} {r.lab_value}")
    print(f"wrote {paths['html']}, {paths['md'].name} and {paths['json'].name}", file=sys.stderr)
    errors = [r for r in results if r.verdict == ERROR]
    for r in errors:
        print(f"error: {r.claim.id}: {r.reason}", file=sys.stderr)
    return 1 if errors else 0


def _at_scale(args: argparse.Namespace, store: RunStore) -> int:
    """``reproduce --budget gpu|gpu1|gpu-test``: plan (``--dry-run`` prints it), launch or continue, collect."""
    papers = args.paper or list(PAPERS)
    try:
        data = parse_data(args.data)
        if args.dry_run:
            device = args.device_kind or device_kind()
            rates = read_throughput(args.throughput or store.root / layout.THROUGHPUT, device)
            print(plan_text(make_plan(args.budget, papers, args.seeds, data), rates, device), end="")
            return 0
        resources = Resources("slurm", args.partition, cpus_per_task=args.cpus_per_task, time=args.time,
                              gpus_per_node=1)
        out = Path(args.out) if args.out else store.root / time.strftime("reproduce-%Y%m%d-%H%M%S")
        ledger = reproduce_at_scale(out, papers=papers, budget=args.budget, seeds=args.seeds, data=data,
                                    executor=args.executor, resources=resources, retry_failed=args.retry_failed,
                                    progress=not args.no_progress)
    except (ConfigError, PlanMismatch, ValueError, EntryError, RunLocked) as err:  # RunLocked: another launcher
        print(f"error: {err}", file=sys.stderr)
        return 2
    states = [record["state"] for record in ledger["runs"].values()]
    print(f"reproduction folder: {out} ({len(states)} runs: " + ", ".join(
        f"{states.count(s)} {s}" for s in dict.fromkeys(states)) + ")", file=sys.stderr)
    failed = failures(out, ledger)
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    if ledger.get("interrupted"):
        print("interrupted: the same command run again continues", file=sys.stderr)
        return 130
    if args.executor == "slurm":
        print(f"submitted; run the same command again to continue, or `python -m lab reproduce --collect {out}`",
              file=sys.stderr)
        return 0
    code = _report(*collect(out))
    return 1 if code or failed else 0
