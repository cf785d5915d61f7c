"""``sweep CONFIG key=v1,v2,...``: every combination of the comma lists trained as few ensembles of residual MLPs,
into one sweep folder of ordinary run folders. Its plan check and exit code serve ``submit`` too."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from typing import TypeVar

from lab.cli.terminate import Terminate
from lab.config import ConfigError
from lab.runfolder.layout import RunState
from lab.runs.store import RunStore
from lab.sweeps import SweepPlan, create_sweep, plan_sweep, train_sweep
from lab.train.core import check_device
from lab.train.requires import require_extras

T = TypeVar("T")


def checked(plan: Callable[[], T]) -> T | None:
    """``plan()`` (a sweep's members, built and checked), or None when the input is bad, after printing why; a
    renamed key warns once, not once per member."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)
            return plan()
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    finally:
        for message in dict.fromkeys(str(w.message) for w in caught):
            print(f"warning: {message}", file=sys.stderr)


def members_exit(statuses: list[dict]) -> int:
    """A sweep's exit code from its members' final statuses: 0 when none failed and at least one completed or was
    stopped (a diverged member is a finding of the sweep, not an error); 1 otherwise."""
    states = [s["state"] for s in statuses]
    ended = any(s in (RunState.COMPLETED, RunState.STOPPED) for s in states)
    return 0 if RunState.FAILED not in states and ended else 1


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``sweep``: 0 when no member failed and at least one completed or was stopped (a diverged member is a
    finding of the sweep: reported, not an error); 1 when every member diverged or one failed; 2 for bad input,
    with nothing written."""
    def members() -> SweepPlan:
        plan = plan_sweep(args.config, args.overrides)
        for member in plan.members:
            check_device(member.config.train.device)
            require_extras(member.config)  # before the sweep's folder is made
        return plan

    plan = checked(members)
    if plan is None:
        return 2
    folder, runs = create_sweep(plan, store)
    print(f"sweep folder: {folder.path} ({len(plan.members)} members in {len(plan.groups)} "
          f"ensemble{'s' if len(plan.groups) > 1 else ''})", file=sys.stderr)
    statuses = train_sweep(plan, folder, runs, progress=not args.no_progress, callbacks=[Terminate()])
    for member, run, status in zip(plan.members, runs, statuses, strict=True):
        metrics = status.get("metrics", {})
        values = " ".join(f"{k}={v}" for k, v in member.texts.items())
        numbers = "".join(f"  {key}={metrics[key]:.4f}" for key in ("test_acc", "test_loss", "probe_acc")
                          if key in metrics and (key != "test_loss" or "test_acc" not in metrics))
        print(f"{run.id}  {values}  {status['state']}{numbers}", file=sys.stderr)
    return members_exit(statuses)
