"""``python -m lab reproduce``: every claim of the three papers that fits a budget, measured and reported.

Toy budgets (:data:`SCOPE` says what each can and cannot show), measured in this process by :func:`reproduce`:
``smoke`` (seconds; what the tests run: it checks the pipeline and judges nothing) and ``cpu`` (toy models on a
2-core machine, each experiment over its own seeds, :data:`EXPERIMENT_SEEDS`). Full-scale budgets (``gpu``,
``gpu1``, ``gpu-test``: :mod:`lab.reproduce.full_scale`) are planned, launched and continued by
:func:`reproduce_at_scale` and judged from their finished runs by :func:`lab.reproduce.collect.collect`. Every
verdict comes from :mod:`lab.reproduce.verdict` (an effect, its interval, a test against seed noise, a floor). Every
training goes into an ordinary run folder under ``OUT/runs`` (the Runs page opens them); the report is
``OUT/report.html`` (self-contained), ``OUT/report.md`` and ``OUT/claims.json`` (:mod:`lab.reproduce.report`). An
experiment that raises is an error, not a verdict: its claims say so, the others go on, and :func:`reproduce`
reports the failures. The core install (no extras) reproduces every paper: a claim whose measurement needs an extra
that is not installed is not measurable, its row naming the extra and its ``pip install`` line
(:func:`lab.reproduce.claims.needs_extras`), and the others are measured.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from lab.extras import missing_extra
from lab.jobs.submit import Resources
from lab.reproduce import alignment, decayed, droppath, ra_transformers, toy_mae
from lab.reproduce.claims import (
    MAX_SEEDS,
    PAPERS,
    Claim,
    Result,
    adjust_for_multiplicity,
    failed,
    family_words,
    needs_extras,
)
from lab.reproduce.full_scale import FULL_BUDGETS
from lab.reproduce.report import write_report
from lab.runfolder import layout
from lab.runfolder.lock import RunLock
from lab.runfolder.writes import own_folder
from lab.runs.store import RunStore, environment_info

__all__ = ["BUDGETS", "PAPERS", "SCOPE", "TOY_BUDGETS", "reproduce", "reproduce_at_scale"]

log = logging.getLogger(__name__)

TOY_BUDGETS = ("smoke", "cpu")
BUDGETS = (*TOY_BUDGETS, *FULL_BUDGETS)
SEEDS = {"smoke": 1, "cpu": 3}
"""The seeds of an experiment :data:`EXPERIMENT_SEEDS` does not list (and of every experiment given ``--seeds``)."""
EXPERIMENT_SEEDS = {
    "smoke": {},
    "cpu": {"alignment.fc": 10, "alignment.conv": 12, "alignment.transformers": 11, "decayed.rank": 4,
            "decayed.toy_mae": 20, "decayed.mae": 3, "decayed.diffusion": 3, "droppath.figure3": 10,
            "droppath.table1": 5},
}
"""Per budget, per experiment, its seeds: as many as the claims need for power 0.8 at their family's Holm level where
the budget's 25 minutes allow (the power column of the report says where they do not). Seeds of the MLPs train as
members of one vectorised ensemble (:func:`lab.reproduce.runs.train_seeds`); Table 1 keeps the paper's five."""
SCOPE = {
    "smoke": "Smoke budget: models of a few units trained for a few steps, one seed. It checks that every measurement "
             "runs and writes its report; it cannot show any claim, and judges none (every row reads 'pipeline "
             "only').",
    "cpu": "CPU budget: toy models (residual MLPs on a 2-D spiral and on 8 × 8 digits, small ResNets, a tiny MAE and "
           "a tiny U-ViT on digits; as the lab's extension, a small ViT on digits and a small GPT-2 on a generated "
           "text), trained for minutes, over 3 to 12 seeds per experiment (each row gives its own). It can show "
           "whether each "
           "mechanism appears at this scale, beyond seed noise; it cannot show the papers' numbers, which come from "
           "ImageNet-scale models trained for days — each row names both settings. 'holds': the effect appears "
           "beyond seed noise; 'differs': the lab's numbers argue against the paper at this scale (significantly "
           "reversed; at this scale the papers' effect sizes are notes, as no toy model is the paper's setting); "
           "'inconclusive': this noise hides the effect either way, and the row says whether this budget had the "
           "power to show it.",
}


def experiment_seeds(budget: str, seeds: int | None = None) -> dict[str, int]:
    """Per experiment of :func:`_experiments`, its seeds at ``budget``: ``seeds`` for every one when given, else
    :data:`EXPERIMENT_SEEDS` (the budget's :data:`SEEDS` where it lists none)."""
    return {key: seeds or EXPERIMENT_SEEDS[budget].get(key, SEEDS[budget]) for key in EXPERIMENTS}


EXPERIMENTS = ("alignment.fc", "alignment.conv", "alignment.transformers", "decayed.rank", "decayed.toy_mae",
               "decayed.mae", "decayed.diffusion", "droppath.figure3", "droppath.table1")
"""The experiments of a toy budget, in report order (:func:`_experiments`)."""


def _experiments(budget: str, seeds: dict[str, int], store: RunStore, out: Path
                 ) -> list[tuple[str, str, list[Claim], int, Callable[[Callable[[], None]], list[Result]]]]:
    """``(key, paper, claims, trainings, run(tick))`` for every experiment of :data:`EXPERIMENTS`, in report
    order."""
    n = seeds
    return [(key, *experiment) for key, experiment in zip(EXPERIMENTS, [
        ("alignment", alignment.claims_of("fc"), 2 * n["alignment.fc"],
         lambda tick: alignment.measure("fc", budget, n["alignment.fc"], store, tick)),
        ("alignment", alignment.claims_of("conv"), 2 * n["alignment.conv"],
         lambda tick: alignment.measure("conv", budget, n["alignment.conv"], store, tick)),
        ("alignment", ra_transformers.all_claims(), 2 * n["alignment.transformers"],
         lambda tick: ra_transformers.measure(budget, n["alignment.transformers"], store, tick)),
        ("decayed", [decayed.CLAIMS["rank"]], len(decayed.SIZES[budget]["depths"])
         + len(decayed.SIZES[budget]["extension"]),
         lambda tick: decayed.measure_rank(budget, n["decayed.rank"], store, tick)),
        ("decayed", list(toy_mae.CLAIMS.values()), 1 + len(toy_mae.SIZES[budget]["widths"]),
         lambda tick: toy_mae.measure(budget, n["decayed.toy_mae"], store, tick)),
        ("decayed", [decayed.CLAIMS["mae"]], 2 * n["decayed.mae"],
         lambda tick: decayed.measure_mae(budget, n["decayed.mae"], store, out, tick)),
        ("decayed", [decayed.CLAIMS[k] for k in ("diffusion_fid", "diffusion_probe")], 2 * n["decayed.diffusion"],
         lambda tick: decayed.measure_diffusion(budget, n["decayed.diffusion"], store, tick)),
        ("droppath", [droppath.CLAIMS["figure3"]], 2 * n["droppath.figure3"],
         lambda tick: droppath.measure_figure3(budget, n["droppath.figure3"], store, tick)),
        ("droppath", [droppath.CLAIMS["table1"]], 3 * n["droppath.table1"],
         lambda tick: droppath.measure_table1(budget, n["droppath.table1"], store, tick)),
    ], strict=True)]


def reproduce(out: str | Path, *, papers: Sequence[str] = tuple(PAPERS), budget: str = "cpu",
              seeds: int | None = None, progress: bool = True, workers: int | None = None
              ) -> tuple[list[Result], dict[str, Path]]:
    """Measure every claim of ``papers`` at ``budget`` and write the report into ``out``.

    An experiment that fails (a run that diverges, data that cannot be read) reports its claims as ``error`` with
    the exception (no verdict); the others go on.

    Args:
        out: the reproduction's folder (made if missing); runs go to ``out/runs``.
        papers: keys of :data:`PAPERS`.
        budget: one of :data:`TOY_BUDGETS`.
        seeds: seeds of every experiment (default: :data:`EXPERIMENT_SEEDS`, each experiment its own).
        progress: a progress bar over the trainings.
        workers: experiments measured at once, each in a process of its own (default :data:`WORKERS`, at most the
            machine's cores): every training runs on one thread, so a second core measures a second experiment.

    Returns:
        The results, and the paths of ``claims.json``, ``report.md`` and ``report.html``.

    Raises:
        ValueError: an unknown paper or budget, or seeds < 1.
    """
    unknown = [p for p in papers if p not in PAPERS]
    if unknown or budget not in TOY_BUDGETS or (seeds is not None and not 1 <= seeds <= MAX_SEEDS):
        raise ValueError(f"papers must be among {', '.join(PAPERS)}, budget one of {', '.join(TOY_BUDGETS)} (the "
                         f"full-scale ones: reproduce_at_scale) and seeds between 1 and {MAX_SEEDS}; got "
                         f"papers={list(papers)}, budget={budget!r}, seeds={seeds}")
    per_experiment = experiment_seeds(budget, seeds)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(own_folder(out / layout.REPRODUCTION_RUNS))
    chosen = [e for e in _experiments(budget, per_experiment, store, out) if e[1] in papers]
    used = {key: per_experiment[key] for key, *_ in chosen}
    total = sum(e[3] for e in chosen)
    start = time.perf_counter()
    workers = max(1, min(workers if workers is not None else WORKERS[budget], os.cpu_count() or 1, len(chosen)))
    with tqdm(total=total, desc=f"reproduce ({budget})", unit="run", disable=not progress or not total,
              dynamic_ncols=True) as bar:
        if workers == 1:
            results = [r for key, *_ in chosen
                       for r in _measure(key, budget, per_experiment, store.root, out, lambda: bar.update(1))]
        else:
            results = _measure_in_parallel([key for key, *_ in chosen], budget, per_experiment, store.root, out,
                                           workers, bar)
    families = adjust_for_multiplicity(results)
    meta = {"budget": budget, "seeds": used if len(set(used.values())) > 1 else next(iter(used.values()), 0),
            "papers": list(papers), "seconds": time.perf_counter() - start,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "scope": f"{SCOPE[budget]} {family_words(families)}",
            "families": families, **environment_info()}
    return results, write_report(results, out, meta)


WORKERS = {"smoke": 1, "cpu": 2}
"""Experiments measured at once by default (:func:`reproduce`): the cpu budget's trainings each take one core, and the
U-ViT's alone takes ten minutes, so on two cores it runs beside the others (measured on a 2-core machine: 19 minutes
two at a time, where one at a time took 25.6 with fewer seeds; docs/reproduce.md)."""


def _measure(key: str, budget: str, seeds: dict[str, int], runs: Path, out: Path, tick: Callable[[], None]
             ) -> list[Result]:
    """Experiment ``key`` of :data:`EXPERIMENTS`, its runs in the folder ``runs``: its results; its claims as not
    measurable, naming the extra, when it needs one that is not installed; or its claims as errors when it fails (a
    run that diverges, data that cannot be read), so that the others go on."""
    _, _, claims, _, run = next(e for e in _experiments(budget, seeds, RunStore(runs), out) if e[0] == key)
    began = time.perf_counter()
    try:
        return run(tick)
    except Exception as err:  # one failed experiment does not lose the others' results
        missing = missing_extra(err) if isinstance(err, ImportError) else None
        if missing is not None:
            return [needs_extras(c, missing.extras) for c in claims]
        log.exception("an experiment of %s failed", ", ".join(c.id for c in claims))
        return [failed(c, err, time.perf_counter() - began) for c in claims]


def _measure_in_parallel(keys: list[str], budget: str, seeds: dict[str, int], runs: Path, out: Path, workers: int,
                         bar: tqdm) -> list[Result]:
    """:func:`_measure` for every experiment of ``keys`` on ``workers`` processes (spawned: torch's threads and
    locks are not forked), the longest first (:data:`LONGEST`); the results in ``keys``' order, the bar ticked as
    each process trains."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("spawn")
    share = max(1, (os.cpu_count() or 1) // workers)
    with context.Manager() as manager, ProcessPoolExecutor(workers, mp_context=context, initializer=_share_of_cores,
                                                          initargs=(share,)) as pool:
        ticks = manager.Queue()
        order = sorted(keys, key=lambda k: k not in LONGEST)
        futures = {key: pool.submit(_measure, key, budget, seeds, runs, out, partial(ticks.put, 1)) for key in order}
        pending = set(futures.values())
        while pending:
            _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            while not ticks.empty():
                bar.update(ticks.get())
        return [r for key in keys for r in futures[key].result()]


def _share_of_cores(threads: int) -> None:
    """A worker's share of the machine's cores, for torch and for the BLAS numpy and scikit-learn call: a config that
    asks for every core (``train.threads: 0``, the U-ViT's) would otherwise run its threads against the other
    workers', and torch's spinning threads then slow both several times over (measured: a U-ViT run 4.6 minutes
    beside a conv net's, 1.6 alone)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(threads)


LONGEST = ("decayed.diffusion",)
"""Experiments started first when several run at once: the U-ViT's trainings take a third of the cpu budget."""


def reproduce_at_scale(out: str | Path, *, papers: Sequence[str] = tuple(PAPERS), budget: str = "gpu",
                       seeds: int | None = None, data: dict[str, Path] | None = None, executor: str = "local",
                       resources: Resources | None = None, retry_failed: bool = False, progress: bool = True
                       ) -> dict[str, Any]:
    """Plan a full-scale reproduction into ``out`` (``reproduce.json``) and launch or continue its runs; the report
    is then written from whatever has finished by :func:`lab.reproduce.collect.collect` (``lab reproduce`` calls it
    once the local executor is done).

    Args:
        out: the report folder; a folder that holds a reproduction of the same budget is continued.
        papers, budget, seeds: what to reproduce (``budget`` one of ``gpu``, ``gpu1``, ``gpu-test``).
        data: ``--data`` names and their folders (:func:`lab.reproduce.plan.parse_data`).
        executor: ``local`` (torchrun per run, here, waiting) or ``slurm`` (one job per run, not waiting).
        resources: the cluster jobs' resources (``slurm``: partition, time limit, …).
        retry_failed: train (or step) failed runs again instead of reporting them.
        progress: a progress bar over the runs.

    Returns:
        The ledger as saved (``reproduce.json``): every run's state.

    Raises:
        ValueError: an unknown paper or budget, seeds out of bounds, or ``out`` holding another budget's
            reproduction.
        RunLocked: another launcher (a live process, named) works on ``out``.
    """
    from lab.reproduce.launch import ledger_for, run_local, run_slurm
    from lab.reproduce.plan import make_plan

    if [p for p in papers if p not in PAPERS]:
        raise ValueError(f"papers must be among {', '.join(PAPERS)}; got {list(papers)}")
    out = Path(out)
    plan = make_plan(budget, list(papers), seeds, data or {})
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):  # one launcher per folder: two would train the same runs and race on reproduce.json
        ledger = ledger_for(plan, out, executor)
        if executor == "slurm":
            return run_slurm(plan, out, ledger, resources or Resources(executor="slurm"), retry_failed=retry_failed)
        return run_local(plan, out, ledger, retry_failed=retry_failed, progress=progress)
