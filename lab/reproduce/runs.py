"""Training for a reproduction: the lab's own commands, run in this process into ordinary run folders.

Every experiment trains through :func:`lab.train.runner.train_and_evaluate` into a run folder under the
reproduction's ``runs/`` (so the Runs page can open each one), and records the command line that does the same
from a shell, which the report prints beside each claim. A config that needs an extra not installed is refused
before its folder is made (:func:`lab.train.requires.require_extras`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from lab.config import CONFIGS, ExperimentConfig, load_config
from lab.data.toy2d import ToyData
from lab.runfolder.layout import RunState
from lab.runs.store import Run, RunStore
from lab.sweeps import SweepMember, SweepPlan, create_sweep, train_sweep
from lab.train.core import Callback
from lab.train.ensemble import ensemble_groups
from lab.train.requires import require_extras
from lab.train.runner import resolved, train_and_evaluate


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
        MissingExtra: the config needs an extra that is not installed (nothing was written).
        ReproductionError: the run did not complete.
    """
    cfg = config(name, overrides)
    require_extras(cfg)
    run = store.create(run_name)
    status = train_and_evaluate(cfg, run, progress=False, callbacks=callbacks, data=data)
    if status["state"] != RunState.COMPLETED:
        raise ReproductionError(f"{run.path}: {status['state']}: {status['message']}")
    return run, command("train", f"configs/{name}.yaml", *overrides, "--name", run_name)


def train_seeds(name: str, overrides: list[str], arms: dict[str, list[str]], seeds: int, store: RunStore, *,
                callbacks: Sequence[Callback] = (), complete: bool = True
                ) -> tuple[dict[str, list[Run]], list[str]]:
    """Train ``configs/<name>.yaml`` for every arm and seed as members of vectorised ensembles (the engine of ``lab
    sweep``): seed k is ``model.seed=k train.seed=k``, each member an ordinary run folder in one sweep folder.

    Members that can share an ensemble (:func:`~lab.train.ensemble.ensemble_groups`) train as one computation, so
    S seeds cost far less than S runs (``bench/seeds.py``); each member is the run it would have been alone.

    Args:
        name, overrides: the config and the overrides every member shares.
        arms: per arm, its own overrides (``{"standard": [], "ResidualDroppath": ["train.droppath=…"]}``).
        seeds: seeds 0 … seeds − 1 of every arm.
        store: where the sweep folder goes.
        callbacks: subscribers to every ensemble's events.
        complete: every member must complete; False where the caller judges members that diverged (their run
            folders say so).

    Returns:
        Per arm, its runs in seed order; and the commands that train seed 0 of each arm alone.

    Raises:
        MissingExtra: a member's config needs an extra that is not installed (nothing was written).
        ReproductionError: a member did not complete (with ``complete``).
    """
    path = CONFIGS / f"{name}.yaml"
    members, keys = [], []
    for arm, extra in arms.items():
        for seed in range(seeds):
            texts = {"arm": arm, "seed": str(seed)}
            cfg = load_config(path, [*overrides, *extra, f"model.seed={seed}", f"train.seed={seed}"])
            members.append(SweepMember(f"{len(members):02d}-{arm}-s{seed}", texts, {"arm": arm, "seed": seed}, cfg))
            keys.append(arm)
    configs = [m.config for m in members]
    for cfg in configs:
        require_extras(cfg)
    plan = SweepPlan(configs[0].name, str(path), tuple(overrides), {"arm": list(arms), "seed": list(range(seeds))},
                     members, ensemble_groups(configs))
    folder, runs = create_sweep(plan, store)
    statuses = train_sweep(plan, folder, runs, progress=False, callbacks=callbacks)
    bad = [f"{r.path}: {s['state']}: {s.get('message', '')}" for r, s in zip(runs, statuses, strict=True)
           if s["state"] != RunState.COMPLETED]
    if bad and complete:
        raise ReproductionError("ensemble members did not complete: " + "; ".join(bad))
    out: dict[str, list[Run]] = {arm: [] for arm in arms}
    for arm, run in zip(keys, runs, strict=True):
        out[arm].append(run)
    lines = [command("train", f"configs/{name}.yaml", *overrides, *extra, "model.seed=0", "train.seed=0")
             for extra in arms.values()]
    return out, lines
