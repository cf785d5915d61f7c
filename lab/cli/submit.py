"""``submit CONFIG [overrides; comma lists sweep] --executor slurm|local``: a sweep (or one run) sent as cluster
jobs, one per member, writing into one sweep folder (:mod:`lab.jobs.submit`)."""

from __future__ import annotations

import argparse
import sys

from lab.cli.sweep import checked, members_exit
from lab.jobs.submit import Resources, SubmissionRefused, check_resources, submit_sweep
from lab.runfolder.layout import RunState
from lab.runs.store import RunStore
from lab.sweeps import SweepPlan, plan_sweep
from lab.train.requires import require_extras


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``submit``: 0 once submitted (without waiting), or, waiting, when no member failed; 1 when a member failed
    or every member diverged (each failed one is named with its job id and log); 2 for bad input, with nothing
    written."""
    def plan() -> tuple[Resources, SweepPlan]:
        resources = Resources(args.executor, args.partition, args.nodes, args.gpus_per_node, args.tasks_per_node,
                              args.cpus_per_task, args.time, args.array_parallelism)
        members = plan_sweep(args.config, args.overrides, ensemble=False)
        check_resources(members, resources)
        for member in members.members:  # the jobs run in this environment: refused before a folder is made
            require_extras(member.config)
        return resources, members

    planned = checked(plan)
    if planned is None:
        return 2
    resources, members = planned
    try:
        sweep = submit_sweep(members, store, resources)
    except SubmissionRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"sweep folder: {sweep.folder.path} ({len(sweep.runs)} job{'s' if len(sweep.runs) > 1 else ''}, "
          f"{args.executor})", file=sys.stderr)
    for run, record in zip(sweep.runs, sweep.job_records(), strict=True):
        print(f"{run.id}  job {record['job_id']}  log {record['stderr']}", file=sys.stderr)
    if not (args.executor == "local" if args.wait is None else args.wait):
        return 0
    statuses = sweep.wait()
    for run, record, status in zip(sweep.runs, sweep.job_records(), statuses, strict=True):
        where = f"  job {record['job_id']}  log {record['stderr']}" if status["state"] == RunState.FAILED else ""
        print(f"{run.id}  {status['state']}: {status.get('message', '')}{where}", file=sys.stderr)
    return members_exit(statuses)
