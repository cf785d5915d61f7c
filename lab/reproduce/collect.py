"""``lab reproduce --collect DIR``: the claims of a full-scale reproduction from whatever of it has finished.

An experiment whose runs (and their steps) have all finished is judged by its collector
(:attr:`~lab.reproduce.full_scale.Experiment.collect`) with the verdict engine the toy budgets use; one with runs
left reads ``pending`` and says how far each is (step n of N, or failed with its log); a claim the plan could not
measure says what it needs. The report is the same ``report.html``, ``report.md`` and ``claims.json`` as the other
budgets write, in the same folder as ``reproduce.json``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from lab.reproduce.claims import Claim, Result, adjust_for_multiplicity, failed, family_words, not_at_this_budget
from lab.reproduce.full_scale import PlannedRun, seed0_commands
from lab.reproduce.launch import folder_of, load_ledger, steps_left
from lab.reproduce.plan import from_ledger
from lab.reproduce.report import write_report
from lab.reproduce.verdict import Stats, Verdict
from lab.runfolder.layout import REPRODUCTION, LedgerState, RunState
from lab.runs.store import Run, environment_info

log = logging.getLogger(__name__)

SCOPE = {
    "gpu": "GPU budget: the papers' configs (lab/configs/), trained by this reproduction's runs; each claim is judged "
           "once all of its runs have finished. What still differs from the papers: 3 seeds per arm where the papers "
           "report one run or none (Table 1: 5 seeds, as the paper's MNIST and CIFAR-10 rows; its ImageNet-1k row had "
           "one); Table 1 trains one model per data set (ResNet50 on MNIST, ResNet50d on CIFAR-10 and ImageNet-1k; "
           "the paper runs both everywhere) for epochs the paper does not state; Residual Alignment runs Types 1 (FC, "
           "MNIST) and 3 (conv, CIFAR-10) of its Types 1-5 on five data sets, with SGD momentum 0.9 (the paper names "
           "none), and Figure 7 on Type 4a at 10 kept checkpoints; Table 4 runs α_min 1.0, 0.8, 0.7 and 0.6, each "
           "zero-initialised, and the plain U-ViT as an extra arm, its FID from 50,000 SDE samples of the best kept "
           "checkpoint with torch-fidelity's Inception; Figures 3 and 9 run only at the cpu budget.",
    "gpu1": "GPU1 budget: what fits one GPU overnight at MNIST/CIFAR scale: the gpu budget's runs with shorter "
            "schedules (Table 1: 5 and 15 epochs on MNIST and CIFAR-10, no ImageNet-1k; Table 4: 50,000 U-ViT steps "
            "of the paper's 500,000; Residual Alignment: 50 epochs of 500, Figure 7: 50 of 350), and no MAE (it "
            "needs ImageNet-100 and the gpu budget); it can show whether each effect appears there, not the papers' "
            "numbers.",
    "gpu-test": "GPU-test budget: every full-scale run shrunk to seconds to check the pipeline on a CPU; it judges "
                "nothing (every row reads 'pipeline only').",
}


def _finished(out: Path, ledger: dict[str, Any], run: PlannedRun) -> Run | None:
    """The run's folder when it has completed and every step has written its output: read from the run folder, the
    record of what happened, never from the ledger's state, which says what the launcher last saw (``submitted``
    until it runs again, after a cluster job trained the run)."""
    folder = folder_of(out, ledger["runs"].get(run.key, {}))
    if folder is None or folder.read_status().get("state") != RunState.COMPLETED:
        return None
    return None if steps_left(folder, list(run.steps)) else folder


def _how_far(out: Path, ledger: dict[str, Any], run: PlannedRun) -> str:
    record = ledger["runs"].get(run.key, {})
    folder = folder_of(out, record)
    state = record.get("state", LedgerState.PLANNED)
    if folder is None:
        return f"{run.key}: not started"
    status = folder.read_status()
    step, total = status.get("step"), status.get("total_steps")
    where = (f"step {step} of {total} ({100 * step / total:.0f} %)" if isinstance(step, int) and
             isinstance(total, int) and total > 0 else f"step {step}" if isinstance(step, int) else "no step yet")
    if state in (RunState.FAILED, LedgerState.STEP_FAILED):
        return f"{run.key}: {state} ({record.get('message', '')})"
    if status.get("state") == RunState.COMPLETED:
        return f"{run.key}: trained, steps left ({', '.join(s.args[0] for s in steps_left(folder, list(run.steps)))})"
    return f"{run.key}: {status.get('state', state)} at {where}"


def pending(claim: Claim, lines: list[str], done: int, total: int, commands: list[str]) -> Result:
    """A claim whose runs have not all finished: how far each is."""
    empty = Stats(math.nan, (math.nan, math.nan), math.nan, math.nan, math.nan, 0)
    return Result(claim, {}, f"{done} of {total} runs finished", Verdict(
        "pending", f"{done} of {total} runs finished; " + "; ".join(lines), empty), "", commands)


def collect(out: str | Path) -> tuple[list[Result], dict[str, Path]]:
    """Judge every claim of the reproduction in ``out`` from its finished runs and write its report there.

    Returns:
        The results, and the paths of ``claims.json``, ``report.md`` and ``report.html``.

    Raises:
        FileNotFoundError: ``out`` holds no ``reproduce.json``.
    """
    out = Path(out)
    ledger = load_ledger(out)
    if not ledger:
        raise FileNotFoundError(f"{out} holds no {REPRODUCTION}: collect a folder that `lab reproduce --budget gpu` "
                                "(or gpu1) planned")
    plan = from_ledger(ledger)
    results: list[Result] = []
    for experiment, runs, missing in plan.experiments:
        measurable = [c for c in experiment.claims if c.id not in missing]
        results += [not_at_this_budget(c, [], missing[c.id]) for c in experiment.claims if c.id in missing]
        if not measurable:
            continue
        finished = {r.key: folder for r in runs if (folder := _finished(out, ledger, r)) is not None}
        commands = seed0_commands(runs)
        if len(finished) < len(runs):
            lines = [_how_far(out, ledger, r) for r in runs if r.key not in finished]
            results += [pending(c, lines, len(finished), len(runs), commands) for c in measurable]
            continue
        try:
            judged = experiment.collect(plan.budget, finished, runs)
        except Exception as err:  # one experiment's unreadable output does not lose the others'
            log.exception("collecting %s failed", ", ".join(c.id for c in measurable))
            results += [failed(c, err, 0.0) for c in measurable]
            continue
        results += [r for r in judged if r.claim.id not in missing]
    for cid, why in plan.not_measurable.items():
        if not any(r.claim.id == cid for r in results):
            results.append(not_at_this_budget(_claim(cid), [], why))
    families = adjust_for_multiplicity(results)
    meta = {"budget": plan.budget, "seeds": plan.seeds, "papers": plan.papers, "seconds": 0.0,
            "started": ledger.get("created", ""), "scope": f"{SCOPE[plan.budget]} {family_words(families)}",
            "families": families, "plan": REPRODUCTION,
            **environment_info()}
    return results, write_report(results, out, meta)


def _claim(cid: str) -> Claim:
    """A claim by id among every experiment's (the toy-only ones included)."""
    from lab.reproduce import alignment, decayed, droppath, toy_mae

    claims = [*decayed.CLAIMS.values(), *droppath.CLAIMS.values(), *toy_mae.CLAIMS.values(),
              *alignment.claims_of("fc"), *alignment.claims_of("conv")]
    return next(c for c in claims if c.id == cid)
