"""``resume RUN [overrides]``: a run continued from its last checkpoint (or ``--checkpoint best``, or ``--restart``
from step 0); what it sets aside moves to ``RUN/history/``. Trained as ``train`` trains (:func:`lab.cli.train.train`).
"""

from __future__ import annotations

import argparse

from lab.cli.train import train
from lab.config import ExperimentConfig, config_of_run
from lab.runs.store import Run, RunStore
from lab.train.resume import ResumePlan, find_run, plan_resume, resume_overrides


def run(args: argparse.Namespace, store: RunStore) -> int:
    """``resume``: the exit status of :func:`lab.cli.main` (2 for a refused resume, with nothing written)."""
    def continued() -> tuple[ExperimentConfig, Run, ResumePlan]:
        found = find_run(args.run, store)
        cfg, changes = resume_overrides(config_of_run(found), args.overrides)
        return cfg, found, plan_resume(found, "restart" if args.restart else args.checkpoint, changes)

    return train(args, store, continued)
