"""``python -m lab reproduce``: every claim of the three papers that fits a budget, measured and reported.

Budgets: ``smoke`` (seconds; what the tests run), ``cpu`` (within 30 minutes on a 2-core machine, 3 seeds; Table 1
5 seeds, as the paper) and ``gpu`` (lists the full-scale commands with the papers' numbers to compare against).
Every training goes into an ordinary run folder under ``OUT/runs`` (the Runs page opens them); the report is
``OUT/report.html`` (self-contained), ``OUT/report.md`` and ``OUT/claims.json``
(:mod:`lab.reproduce.report`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from lab.reproduce import alignment, decayed, droppath
from lab.reproduce.claims import PAPERS, Claim, Result
from lab.reproduce.report import write_report
from lab.runs.store import RunStore, environment_info

__all__ = ["BUDGETS", "PAPERS", "reproduce"]

BUDGETS = ("smoke", "cpu", "gpu")
SEEDS = {"smoke": 1, "cpu": 3, "gpu": 1}
TABLE1_SEEDS = 5  # the paper's Table 1 is over five seeds


def _experiments(budget: str, seeds: int, store: RunStore, out: Path
                 ) -> list[tuple[str, list[Claim], int, Callable[[Callable[[], None]], list[Result]]]]:
    """``(paper, claims, trainings, run(tick))`` for every experiment, in report order."""
    table_seeds = max(seeds, TABLE1_SEEDS) if budget == "cpu" else seeds
    return [
        ("alignment", alignment.claims_of("fc"), 2 * seeds,
         lambda tick: alignment.measure("fc", budget, seeds, store, tick)),
        ("alignment", alignment.claims_of("conv"), 2 * seeds,
         lambda tick: alignment.measure("conv", budget, seeds, store, tick)),
        ("decayed", [decayed.CLAIMS[k] for k in ("rank", "correlation", "controls")], 2 * seeds,
         lambda tick: decayed.measure_rank(budget, seeds, store, tick)),
        ("decayed", [decayed.CLAIMS["mae"]], 2 * seeds,
         lambda tick: decayed.measure_mae(budget, seeds, store, out, tick)),
        ("decayed", [decayed.CLAIMS[k] for k in ("diffusion_fid", "diffusion_probe")], 2 * seeds,
         lambda tick: decayed.measure_diffusion(budget, seeds, store, tick)),
        ("droppath", [droppath.CLAIMS["figure3"]], 2 * seeds,
         lambda tick: droppath.measure_figure3(budget, seeds, store, tick)),
        ("droppath", [droppath.CLAIMS["table1"]], 3 * table_seeds,
         lambda tick: droppath.measure_table1(budget, table_seeds, store, tick)),
    ]


def reproduce(out: str | Path, *, papers: Sequence[str] = tuple(PAPERS), budget: str = "cpu",
              seeds: int | None = None, progress: bool = True) -> tuple[list[Result], dict[str, Path]]:
    """Measure every claim of ``papers`` at ``budget`` and write the report into ``out``.

    An experiment that fails (a run that diverges, data that cannot be read) reports its claims as not measurable,
    with the error as the reason; the others go on.

    Args:
        out: the reproduction's folder (made if missing); runs go to ``out/runs``.
        papers: keys of :data:`PAPERS`.
        budget: one of :data:`BUDGETS`.
        seeds: seeds per measurement (default 1 for smoke, 3 for cpu).
        progress: a progress bar over the trainings.

    Returns:
        The results, and the paths of ``claims.json``, ``report.md`` and ``report.html``.

    Raises:
        ValueError: an unknown paper or budget, or seeds < 1.
    """
    unknown = [p for p in papers if p not in PAPERS]
    if unknown or budget not in BUDGETS or (seeds is not None and seeds < 1):
        raise ValueError(f"papers must be among {', '.join(PAPERS)}, budget one of {', '.join(BUDGETS)} and seeds "
                         f">= 1; got papers={list(papers)}, budget={budget!r}, seeds={seeds}")
    seeds = seeds or SEEDS[budget]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(out / "runs")
    chosen = [e for e in _experiments(budget, seeds, store, out) if e[0] in papers]
    total = sum(e[2] for e in chosen) if budget != "gpu" else 0
    start = time.perf_counter()
    results: list[Result] = []
    with tqdm(total=total, desc=f"reproduce ({budget})", unit="run", disable=not progress or not total,
              dynamic_ncols=True) as bar:
        for _, claims, _, run in chosen:
            began = time.perf_counter()
            try:
                results += run(lambda: bar.update(1))
            except Exception as err:  # one failed experiment does not lose the others' results
                why = f"the experiment failed: {type(err).__name__}: {err}"
                results += [Result(c, {}, "—", "not measurable", why, [], time.perf_counter() - began)
                            for c in claims]
    meta = {"budget": budget, "seeds": seeds, "papers": list(papers), "seconds": time.perf_counter() - start,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), **environment_info()}
    return results, write_report(results, out, meta)
