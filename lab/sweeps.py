"""Sweeps: config keys over comma lists, each member an ordinary run folder, trained as a few ensembles.

``python -m lab sweep configs/spiral.yaml model.alpha_min=1.0,0.8,0.6,0.5`` is the evidence of *Residual
Connections Harm Generative Representation Learning* in one command. An override whose value holds a comma
outside brackets and quotes is swept; two or more swept keys sweep their product (the first key varies slowest).
Members that differ only in keys the ensemble can vary (:data:`lab.train.ensemble.MEMBER_KEYS`) train together
as one :class:`~lab.train.ensemble.EnsembleTrainer`; the others (``model.depth``, ``data.*``, ...) split the
members into groups trained one ensemble after another.

A sweep folder::

    <runs>/<stamp>-<name>-sweep/
        sweep.json                      the swept keys, each member's run folder, values, group and state
        <stamp>-00-alpha_min-1.0/       one ordinary run folder per member: config.json (its full resolved
        <stamp>-01-alpha_min-0.8/       config), status.json, metrics.jsonl, checkpoints/, TensorBoard events
        ...

so every reader of run folders opens a member unchanged (``RunStore(sweep_folder)`` lists them). A member's
checkpoint also resumes as a solo run (``python -m lab resume <member folder>``); a sweep itself is not resumed.
"""

from __future__ import annotations

import contextlib
import itertools
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from lab.config import PIXEL_TASKS, ConfigError, ExperimentConfig, load_config, parse_override, to_dict
from lab.data.toy2d import TOY_DATASETS
from lab.runfolder import layout
from lab.runfolder.entries import LIMITS, read_json
from lab.runfolder.layout import RunState
from lab.runfolder.lock import RunLock
from lab.runfolder.writes import atomic_write_json
from lab.runs.store import Run, RunStore, end_state
from lab.train.core import Callback
from lab.train.ensemble import MODEL, EnsembleMember, EnsembleTrainer, ensemble_groups
from lab.train.recorder import RunRecorder
from lab.train.stop import StopFile


@dataclass(frozen=True)
class SweepMember:
    """One point of a sweep: its run name, the swept keys' values (as typed and as parsed) and its full config."""

    name: str
    texts: dict[str, str]
    values: dict[str, Any]
    config: ExperimentConfig


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: the members in product order and the ensembles (lists of member indices) they form."""

    name: str
    config_path: str
    fixed: tuple[str, ...]
    swept: dict[str, list[Any]]
    members: list[SweepMember]
    groups: list[list[int]]


def split_values(text: str) -> list[str]:
    """Split an override's value at the commas outside brackets, braces and quotes: ``"1.0,0.8"`` → two values,
    ``"[0.9, 0.99]"`` → one, ``"[0.9,0.99],[0.8,0.99]"`` → two."""
    parts, depth, quote, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _member_name(index: int, texts: dict[str, str]) -> str:
    leaves = [key.rpartition(".")[2] for key in texts]
    labels = leaves if len(set(leaves)) == len(leaves) else list(texts)
    return "-".join([f"{index:02d}", *(f"{label}-{text}" for label, text in zip(labels, texts.values(), strict=True))])


def plan_sweep(config: str | Path, overrides: Sequence[str], *, ensemble: bool = True) -> SweepPlan:
    """Parse and validate a sweep: every member's config is built (and so checked) before anything is written.

    Args:
        config: the YAML config.
        overrides: dotted overrides; a value with top-level commas (``model.alpha_min=1.0,0.8``) is swept.
        ensemble: the members train as ensembles of residual MLPs (:func:`train_sweep`); False for members that
            each train as their own run, of any model (:mod:`lab.jobs.submit`: one cluster job each), where a
            plan without a comma list is one member.

    Raises:
        ConfigError: a malformed override, an invalid member config (the message names the key), a key swept
            twice; for an ensemble also no swept key, a model other than the residual MLP, or a data set that is
            not a toy set.
    """
    fixed: list[str] = []
    swept: dict[str, list[str]] = {}
    for text in overrides:
        key, sep, raw = text.partition("=")
        values = split_values(raw) if sep else [raw]
        if len(values) == 1:
            parse_override(text)  # a malformed override is reported here, before any member is built
            fixed.append(text)
            continue
        key = key.strip()
        if key in swept:
            raise ConfigError(f"{key} is swept twice; give one comma list per key")
        if any(not v for v in values):
            raise ConfigError(f"override {text!r} has an empty value in its comma list")
        swept[key] = values
    if not swept and ensemble:
        raise ConfigError("nothing to sweep: give at least one comma list, such as model.alpha_min=1.0,0.8,0.6")
    members = []
    for index, combo in enumerate(itertools.product(*swept.values())):
        texts = dict(zip(swept, combo, strict=True))
        cfg = load_config(config, [*fixed, *(f"{k}={v}" for k, v in texts.items())])
        if ensemble and cfg.model.name != MODEL:
            raise ConfigError(f"a sweep trains {MODEL} models in one ensemble; model.name is {cfg.model.name}")
        if ensemble and cfg.data.name not in (*TOY_DATASETS, "digits") and cfg.train.task not in PIXEL_TASKS:
            raise ConfigError(f"{MODEL} classifies 2-D points or scikit-learn's digits (flattened); "
                              f"data.name={cfg.data.name} is neither ({', '.join(TOY_DATASETS)}, digits): on other "
                              "images it learns train.task=masked or denoise")
        values = {k: parse_override(f"{k}={v}")[1] for k, v in texts.items()}
        members.append(SweepMember(_member_name(index, texts), texts, values, cfg))
    configs = [m.config for m in members]
    parsed = {k: [parse_override(f"{k}={v}")[1] for v in vs] for k, vs in swept.items()}
    groups = ensemble_groups(configs) if ensemble else [[i] for i in range(len(members))]
    return SweepPlan(configs[0].name, str(config), tuple(fixed), parsed, members, groups)


class _Progress(Callback):
    """One tqdm bar per ensemble: steps, members still training, their mean loss and the best test accuracy."""

    def __init__(self, desc: str) -> None:
        self.desc, self.bar, self.best = desc, None, None

    def on_train_start(self, ensemble: EnsembleTrainer) -> None:
        self.bar = tqdm(total=ensemble.total_steps, initial=ensemble.step, desc=self.desc, unit="step",
                        dynamic_ncols=True)

    def on_step_end(self, ensemble: EnsembleTrainer, losses: dict[int, float]) -> None:
        self.bar.update(1)
        if ensemble.step % 10 == 0:
            live = [losses[m.index] for m in ensemble.live]
            self._postfix(ensemble, loss=f"{sum(live) / len(live):.4f}" if live else "-")

    def on_eval_end(self, ensemble: EnsembleTrainer, metrics: dict[int, dict[str, float]]) -> None:
        accs = [m["test_acc"] for m in metrics.values() if "test_acc" in m]
        if accs:
            self.best = max(accs)
        self._postfix(ensemble)

    def _postfix(self, ensemble: EnsembleTrainer, **extra: str) -> None:
        best = {} if self.best is None else {"best_test_acc": f"{self.best:.3f}"}
        self.bar.set_postfix(training=f"{len(ensemble.live)}/{len(ensemble.members)}", **extra, **best,
                             refresh=False)

    def on_train_end(self, ensemble: EnsembleTrainer) -> None:
        if self.bar is not None:
            self.bar.close()


def final_status(run: Run, member: EnsembleMember) -> dict[str, Any]:
    """Write member ``member``'s final status into its run folder ``run``, as a solo run's end writes it
    (``completed``, ``stopped`` or ``diverged`` with the step and the likely cause), and return it."""
    if member.diverged is not None:
        return run.write_status(RunState.DIVERGED, str(member.diverged), step=member.diverged.step, epoch=member.epoch,
                                total_steps=member.total_steps, metrics=member.last_eval)
    return run.write_status(*end_state(member.step, member.total_steps),
                            step=member.step, epoch=member.epoch, total_steps=member.total_steps,
                            metrics=member.last_eval)


def write_sweep_file(folder: Run, plan: SweepPlan, runs: list[Run], statuses: list[dict[str, Any]],
                     jobs: list[dict[str, str]] | None = None) -> None:
    """Write sweep.json: the plan, and per member its run folder, values, group and state (and, for members sent
    to a cluster, ``jobs``: each one's job id and log files)."""
    group_of = {i: g for g, members in enumerate(plan.groups) for i in members}
    atomic_write_json(folder.path / layout.SWEEP, {
        "name": plan.name, "config": plan.config_path, "overrides": list(plan.fixed), "swept": plan.swept,
        "groups": plan.groups,
        "members": [{"run": run.id, "values": m.values, "group": group_of[i], "state": s["state"],
                     "message": s.get("message", ""), **(jobs[i] if jobs else {})}
                    for i, (m, run, s) in enumerate(zip(plan.members, runs, statuses, strict=True))],
    })


def read_sweep(folder: str | Path) -> dict[str, Any]:
    """A sweep folder's sweep.json (a regular file: never read through a link or waited on as a pipe).

    Raises:
        FileNotFoundError, EntryError: it is missing, a link or not a regular file. ValueError: it is not JSON.
    """
    return read_json(Path(folder) / layout.SWEEP, LIMITS[layout.SWEEP])


def create_sweep(plan: SweepPlan, store: RunStore, waiting: str = "waiting for its ensemble") -> tuple[Run, list[Run]]:
    """Write a new sweep folder in ``store``: every member's run folder (config.json, status ``queued`` with the
    message ``waiting``) and sweep.json.

    Returns:
        The sweep folder (a :class:`Run` for its path; not itself a run) and the members' run folders.
    """
    folder = store.create(f"{plan.name}-sweep")
    for sub in layout.FOLDERS:  # RunStore makes these for runs; a sweep folder holds runs instead
        (folder.path / sub).rmdir()
    members_store = RunStore(folder.path)
    runs = []
    for member in plan.members:
        run = members_store.create(member.name)
        run.write_config(to_dict(member.config))
        runs.append(run)
    statuses = [run.write_status(RunState.QUEUED, waiting) for run in runs]
    write_sweep_file(folder, plan, runs, statuses)
    return folder, runs


def train_sweep(plan: SweepPlan, folder: Run, runs: list[Run], *, progress: bool = True,
                callbacks: Iterable[Callback] = ()) -> list[dict[str, Any]]:
    """Train the members of :func:`create_sweep`'s folder, one ensemble per group, updating sweep.json as groups end.

    A member ends ``completed``, ``stopped`` (its STOP file, or a callback setting ``ensemble.should_stop``; later
    groups then do not start and their members read ``stopped``) or ``diverged`` (the others go on). An exception
    marks the unfinished members ``failed`` and is re-raised.

    Args:
        plan: from :func:`plan_sweep`.
        folder: the sweep folder.
        runs: the members' run folders, in plan order.
        progress: a tqdm bar per ensemble.
        callbacks: subscribers to every ensemble's events (e.g. a signal handler that sets ``should_stop``).

    Returns:
        Each member's final status.

    Raises:
        RunLocked: a member is being trained by another process (nothing was trained).
    """
    callbacks = list(callbacks)
    with contextlib.ExitStack() as locks:  # every member is the sweep's to train: no other process resumes one
        for run in runs:
            locks.enter_context(RunLock(run.path))
        return _train_groups(plan, folder, runs, progress, callbacks)


def _train_groups(plan: SweepPlan, folder: Run, runs: list[Run], progress: bool,
                  callbacks: list[Callback]) -> list[dict[str, Any]]:
    statuses = [run.read_status() for run in runs]
    stopped = False
    for g, group in enumerate(plan.groups):
        if stopped:
            for i in group:
                statuses[i] = runs[i].write_status(RunState.STOPPED, "not started: the sweep was stopped")
            continue
        recorders = [RunRecorder(runs[i]) for i in group]
        extra = [_Progress(f"{plan.name} {g + 1}/{len(plan.groups)}")] if progress else []
        ensemble = None
        try:
            ensemble = EnsembleTrainer([plan.members[i].config for i in group],
                                       [[rec, StopFile(runs[i])] for rec, i in zip(recorders, group, strict=True)],
                                       [*extra, *callbacks])
            ensemble.fit()
            stopped = ensemble.should_stop
        except BaseException as err:
            for j, i in enumerate(group):
                member = ensemble.members[j] if ensemble is not None else None
                if member is not None and member.ended:
                    statuses[i] = final_status(runs[i], member)
                else:
                    statuses[i] = runs[i].write_status(
                        RunState.FAILED, f"{type(err).__name__}: {err}", traceback=traceback.format_exc(limit=20),
                        **({} if member is None else {"step": member.step, "epoch": member.epoch,
                                                      "total_steps": member.total_steps}))
            for later in plan.groups[g + 1:]:
                for i in later:
                    statuses[i] = runs[i].write_status(RunState.STOPPED, "not started: the sweep ended with an error")
            write_sweep_file(folder, plan, runs, statuses)
            raise
        finally:
            for rec in recorders:
                rec.close()
        for j, i in enumerate(group):
            statuses[i] = final_status(runs[i], ensemble.members[j])
        write_sweep_file(folder, plan, runs, statuses)
    write_sweep_file(folder, plan, runs, statuses)
    return statuses
