"""A full-scale reproduction's plan: every run of every experiment the data given allows, the claims it cannot
measure and why, and what it costs.

:func:`make_plan` asks each :data:`~lab.reproduce.full_scale.EXPERIMENTS` entry for its runs at a budget (runs
shared by several claims, such as the MAE's α_min sweep, are planned once); :func:`plan_text` is what ``lab
reproduce --dry-run`` prints: every run with its config, overrides and seed, the data it reads, the processes it
starts and its GPU-hours (:mod:`lab.reproduce.estimate`), then the claims left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from lab.config import ConfigError
from lab.reproduce.claims import MAX_SEEDS
from lab.reproduce.estimate import gpu_hours
from lab.reproduce.full_scale import DATASETS, EXPERIMENTS, FULL_BUDGETS, TOY_ONLY, Experiment, PlannedRun, Step

SEEDS = {"gpu": 3, "gpu1": 3, "gpu-test": 1}
"""Default seeds per full-scale budget: three, so that a verdict can be tested against seed noise."""


@dataclass
class Plan:
    """Every run of a full-scale reproduction and what it cannot measure.

    Attributes:
        budget, papers, seeds, data: what it was planned for.
        experiments: per experiment, its runs and, per claim it cannot measure, why.
        runs: every run once, in report order.
    """

    budget: str
    papers: list[str]
    seeds: int
    data: dict[str, Path]
    experiments: list[tuple[Experiment, list[PlannedRun], dict[str, str]]] = field(default_factory=list)
    runs: list[PlannedRun] = field(default_factory=list)

    @property
    def not_measurable(self) -> dict[str, str]:
        """Claim id → why this plan cannot measure it (data missing, another budget), toy-only claims included."""
        out = {cid: why for _, _, missing in self.experiments for cid, why in missing.items()}
        return out | {cid: why for cid, why in TOY_ONLY.items() if cid.split(".")[0] in self.papers}


def parse_data(items: list[str]) -> dict[str, Path]:
    """``--data NAME=DIR`` arguments as ``{name: absolute path}``.

    Raises:
        ConfigError: an unknown name (the message lists them), a repeated one, a path that does not exist, or one
            that lacks the files its data set needs (named).
    """
    data: dict[str, Path] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or not value:
            raise ConfigError(f"--data takes NAME=DIR, got {item!r}")
        if name not in DATASETS:
            raise ConfigError(f"unknown data {name!r}; known: " + "; ".join(f"{d.name} ({d.what})"
                                                                         for d in DATASETS.values()))
        if name in data:
            raise ConfigError(f"--data {name} is given twice")
        path = Path(value).expanduser().resolve()
        if not path.exists():
            raise ConfigError(f"--data {name}={value}: no such {'file' if name == 'inception' else 'folder'}")
        missing = _missing_files(name, path)
        if missing:
            raise ConfigError(f"--data {name}={value} must be {DATASETS[name].what}: {missing}")
        data[name] = path
    return data


def _missing_files(name: str, path: Path) -> str:
    """What the data set ``name`` lacks at ``path`` for its runs to read it, in words ("" when nothing): the files
    its reader looks for, checked before anything is planned rather than hours into a queue."""
    from lab.data.readers import DatasetNotFoundError, find_cifar_folder, find_mnist_files

    try:
        if name == "mnist":
            find_mnist_files(path)
        elif name == "cifar10":
            find_cifar_folder(path, 10)
    except DatasetNotFoundError as err:
        return str(err)
    if name == "inception":
        return "" if path.is_file() else "it is not a file"
    if name in ("imagenet100", "imagenet", "cifar100"):
        empty = [split for split in ("train", "val")
                 if not (path / split).is_dir() or not any(p.is_dir() for p in (path / split).iterdir())]
        return f"no class folders in {', '.join(str(path / s) for s in empty)}" if empty else ""
    return ""


def make_plan(budget: str, papers: list[str], seeds: int | None, data: dict[str, Path]) -> Plan:
    """The runs of ``papers``' full-scale experiments at ``budget`` with ``data``.

    Raises:
        ValueError: ``budget`` is not a full-scale budget, or ``seeds`` is not between 1 and
            :data:`~lab.reproduce.claims.MAX_SEEDS` (a ``reproduce.json`` may say anything).
    """
    if budget not in FULL_BUDGETS or (seeds is not None and not (isinstance(seeds, int) and 1 <= seeds <= MAX_SEEDS)):
        raise ValueError(f"a full-scale plan takes a budget among {', '.join(FULL_BUDGETS)} and seeds between 1 and "
                         f"{MAX_SEEDS}; got {budget!r} and {seeds!r}")
    plan = Plan(budget, list(papers), seeds or SEEDS[budget], dict(data))
    seen: set[str] = set()
    for experiment in EXPERIMENTS:
        if experiment.paper not in papers:
            continue
        runs, missing = experiment.plan(budget, plan.seeds, data)
        plan.experiments.append((experiment, runs, missing))
        plan.runs += [r for r in runs if r.key not in seen]
        seen |= {r.key for r in runs}
    return plan


def recorded(plan: Plan) -> list[dict[str, Any]]:
    """What ``reproduce.json`` keeps of the plan's experiments (their runs are its records): each one's claims, the
    keys of its runs and why it cannot measure the claims it cannot."""
    return [{"claims": [c.id for c in experiment.claims], "runs": [r.key for r in runs], "missing": missing}
            for experiment, runs, missing in plan.experiments]


def from_ledger(ledger: dict[str, Any]) -> Plan:
    """The plan a ``reproduce.json`` recorded when its runs were launched: their configs, overrides, processes and
    steps as launched, grouped by experiment as then, whatever today's code would plan (another seed count, a run
    added or renamed). Only what judges the runs, each experiment's collector, comes from today's code. A ledger
    written before experiments were recorded is planned anew, its runs as recorded.

    Raises:
        ValueError: the ledger's experiments or runs are not what a launcher writes, or name claims that today's
            code does not measure.
    """
    runs = {key: _planned_run(key, record) for key, record in ledger["runs"].items()}
    data = {k: Path(v) for k, v in ledger["data"].items()}
    if "experiments" not in ledger:
        plan = make_plan(ledger["budget"], ledger["papers"], ledger["seeds"], data)
        plan.experiments = [(e, [runs.get(r.key, r) for r in rs], missing) for e, rs, missing in plan.experiments]
        plan.runs = [runs.get(r.key, r) for r in plan.runs]
        return plan
    plan = Plan(ledger["budget"], list(ledger["papers"]), ledger["seeds"], data, runs=list(runs.values()))
    by_claims = {frozenset(c.id for c in e.claims): e for e in EXPERIMENTS}
    for entry in ledger["experiments"]:
        try:
            claims, keys, missing = frozenset(entry["claims"]), list(entry["runs"]), dict(entry["missing"])
            experiment, planned = by_claims.get(claims), [runs[key] for key in keys]
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"reproduce.json's experiment {entry!r} is not what a launcher records ({err!r})") \
                from None
        if experiment is None:
            raise ValueError(f"reproduce.json records an experiment of claims {', '.join(sorted(claims))}, which "
                             "this version of the lab does not measure together: collect it with the version that "
                             "launched it")
        plan.experiments.append((experiment, planned, missing))
    return plan


def _planned_run(key: str, record: dict[str, Any]) -> PlannedRun:
    """The :class:`PlannedRun` a ledger record holds (the launcher records every field of it)."""
    try:
        values = {f.name: record[f.name] for f in fields(PlannedRun) if f.name in record}
        values.update(key=key, overrides=tuple(values["overrides"]), data=tuple(values["data"]),
                      steps=tuple(Step(tuple(s["args"]), s["output"]) for s in values.get("steps", ())))
        if values.get("images") is None:
            values["images"] = math.nan
        return PlannedRun(**values)
    except (KeyError, TypeError) as err:
        raise ValueError(f"reproduce.json's run {key!r} is not what a launcher records ({err!r})") from None


def _hours(value: float) -> str:
    return "unknown" if not math.isfinite(value) else f"{value:,.1f}"


def plan_text(plan: Plan, rates: dict[str, float], device: str) -> str:
    """What ``--dry-run`` prints: every run, its data and GPU-hours on ``device``, the total, and what is left out."""
    lines = [f"Reproduction plan: {plan.budget} budget, {plan.seeds} seed(s), papers {', '.join(plan.papers)}; "
             f"GPU-hours on {device} from measured throughput (unknown: no bench measured it there)", ""]
    total, unknown = 0.0, 0
    for run in plan.runs:
        hours = gpu_hours(run.images, run.bench, rates)
        total += hours if math.isfinite(hours) else 0.0
        unknown += not math.isfinite(hours)
        lines += [f"{run.key}  [{', '.join(run.data)}; {run.processes} process(es); GPU-hours {_hours(hours)}]",
                  *(f"    {line}" for line in run.commands())]
    lines += ["", f"{len(plan.runs)} runs; {total:,.1f} GPU-hours estimated" + (f", {unknown} run(s) unknown (run "
              "`lab throughput mae` and `lab throughput uvit` with --record on this device)" if unknown else ""),
              ""]
    if plan.not_measurable:
        lines.append("Not measurable with this plan:")
        lines += [f"  {cid}: {why}" for cid, why in plan.not_measurable.items()]
    return "\n".join(lines) + "\n"
