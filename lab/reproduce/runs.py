"""Training for a reproduction: the lab's own commands, run in this process into ordinary run folders.

Every experiment trains through :func:`lab.jobs.runner.train_and_evaluate` into a run folder under the
reproduction's ``runs/`` (so the Runs page can open each one), and records the command line that does the same
from a shell, which the report prints beside each claim.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from lab.config import CONFIGS, ExperimentConfig, load_config
from lab.data.toy2d import ToyData
from lab.jobs.runner import resolved, train_and_evaluate
from lab.runfolder.layout import RunState
from lab.runs.store import Run, RunStore
from lab.train.core import Callback


class ReproductionError(RuntimeError):
    """A training run of a reproduction did not complete (diverged, failed); the message names the run."""


def command(*args: str) -> str:
    """``python -m lab ARGS`` as a shell line."""
    return "python -m lab " + " ".join(shlex.quote(a) for a in args)


def config(name: str, overrides: list[str]) -> ExperimentConfig:
    """``configs/<name>.yaml`` with ``overrides``, its engine decided."""
    return resolved(load_config(CONFIGS / f"{name}.yaml", overrides))


def train(name: str, overrides: list[str], store: RunStore, run_name: str, *, callbacks: Sequence[Callback] = (),
          data: ToyData | None = None) -> tuple[Run, str]:
    """Train ``configs/<name>.yaml`` with ``overrides`` into a new run folder of ``store``.

    Args:
        name, overrides: the config.
        store: where the run folder goes.
        run_name: its name.
        callbacks: what follows the training besides the run's recorder (a measurement over epochs).
        data: the config's data, when the caller built it already.

    Returns:
        The run folder and the command that trains the same from a shell.

    Raises:
        ReproductionError: the run did not complete.
    """
    cfg = config(name, overrides)
    run = store.create(run_name)
    status = train_and_evaluate(cfg, run, progress=False, callbacks=callbacks, data=data)
    if status["state"] != RunState.COMPLETED:
        raise ReproductionError(f"{run.path}: {status['state']}: {status['message']}")
    return run, command("train", f"configs/{name}.yaml", *overrides, "--name", run_name)
