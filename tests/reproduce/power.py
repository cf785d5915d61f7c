"""Simulating a paper's family of claims through their own rules and Holm's adjustment, as ``lab reproduce`` judges
them, to measure each claim's power at its budget (the ``test_power_*`` files).

A family is a function of a random generator and per-claim effect scales (1: the paper's effect in the lab's units at
the lab's measured seed noise; 0: no effect; −1: the opposite effect) that returns the family's results, every claim
decided by its own rule; :func:`simulate` draws :data:`N` experiments and adjusts each within its family
(:func:`lab.reproduce.claims.adjust_for_multiplicity`), as a reproduction does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from lab.reproduce.claims import Result, adjust_for_multiplicity
from lab.reproduce.verdict import ALPHA, Verdict, power_all

N = 300
"""Simulated experiments per scenario."""
BOUND = 0.05 + 2 * math.sqrt(0.05 * 0.95 / N)
"""At most this share may read "holds" (or "differs") with no effect: 5 % plus two binomial standard errors."""
POWER = 0.8
"""The power a claim must reach at the paper's effect, or say it does not."""

Family = Callable[[np.random.Generator, dict[str, float]], list[Result]]


def simulate(family: Family, scales: dict[str, float], seed: int, n: int = N) -> dict[str, list[Verdict]]:
    """``n`` experiments of ``family`` at ``scales`` (claims not named: 1), each Holm-adjusted within its family;
    per claim id, its verdicts."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[Verdict]] = defaultdict(list)
    for _ in range(n):
        results = family(rng, scales)
        adjust_for_multiplicity(results)
        for r in results:
            out[r.claim.id].append(r.judged)
    return out


def share(verdicts: Sequence[Verdict], name: str) -> float:
    return float(np.mean([v.verdict == name for v in verdicts]))


def normal(rng: np.random.Generator, mean: float, sd: float, n: int) -> list[float]:
    return rng.normal(mean, sd, n).tolist()


def paired(rng: np.random.Generator, level: tuple[float, float], effect: float, sd: float, n: int
           ) -> tuple[list[float], list[float]]:
    """Two arms sharing each seed: the first at ``level`` (mean, sd), the second the first plus ``effect`` with
    seed noise ``sd`` on the difference."""
    a = rng.normal(level[0], level[1], n)
    return a.tolist(), (a + rng.normal(effect, sd, n)).tolist()


def null_correlations(rng: np.random.Generator, n: int, points: int, *, spearman: bool) -> list[float]:
    """Per seed, the correlation of two unrelated variables over ``points`` values: its exact null."""
    x, y = rng.normal(size=(2, n, points))
    if spearman:
        x, y = x.argsort(axis=1).argsort(axis=1).astype(float), y.argsort(axis=1).argsort(axis=1).astype(float)
    x, y = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
    return ((x * y).sum(axis=1) / np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))).tolist()


def detectable_scale(verdicts: Sequence[Verdict], power_: float = 0.9) -> float:
    """How many times a claim's planned effects must grow for its budget to detect them with ``power_``, read off its
    rows as a reproduction reports them (``verdicts``: at the paper's effect): each part's planned effect and seed
    noise (medians over the experiments), its seeds, every part at its family's worst-case Holm level."""
    rows = [v for v in verdicts if v.family]
    parts = [(float(np.nanmedian([v.plans[i][0].effect for v in rows])),
              float(np.nanmedian([v.plans[i][1].sd for v in rows]))) for i in range(len(rows[0].plans))]
    seeds, level = rows[0].stats.seeds, ALPHA / max(v.family for v in rows)

    def enough(k: float) -> bool:
        return power_all([(k * effect, sd) for effect, sd in parts], seeds, level) >= power_

    low, high = 1.0, 2.0
    while not enough(high):
        low, high = high, 2 * high
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


POWERED, UNDERPOWERED, UNMEASURED = "powered", "underpowered", "not measurable"
"""What a claim's budget gives it, as the ``test_power_*`` files expect it: power 0.8 at the paper's effect; less,
and its row says so; or a floor the lab's network does not clear (its row says which)."""


def check(claim: str, at_paper: list[Verdict], at_null: list[Verdict], at_opposite: list[Verdict], *,
          expect: str, room: bool = True, detectable: list[Verdict] | None = None) -> None:
    """The three checks of a claim's power (see the ``test_power_*`` files), printing its rates (``pytest -s``):

    - with no effect, "holds" and "differs" each in at most :data:`BOUND`, and under the opposite effect "holds" too;
    - :data:`POWERED`: at the paper's effect "holds" in at least :data:`POWER`, and (``room``: the metric can move
      as far as needed) under the opposite effect "differs" in at least :data:`POWER`;
    - :data:`UNDERPOWERED`: the claim says so — every experiment at the paper's effect that ends "inconclusive" says
      "underpowered at this budget" with the seeds it needs, the power a row gives is below :data:`POWER`, and
      "holds" comes out at least as often as that power promises, less 0.1 (the power is sized at the family's
      worst-case Holm level, so it may promise less than the family gives, never more); and at an effect as many
      times the paper's as its budget can detect (:func:`detectable_scale`, ``detectable``), "holds" in at least
      :data:`POWER`: the rule decides where the seeds allow it;
    - :data:`UNMEASURED`: most experiments at the paper's effect are "not measurable", and say why.
    """
    holds, power_ = share(at_paper, "holds"), [v.power for v in at_paper if math.isfinite(v.power)]
    promised = float(np.mean(power_)) if power_ else math.nan
    print(f"\n{claim}: holds at the paper's effect {holds:.3f} (rows' mean power {promised:.2f}; not measurable "
          f"{share(at_paper, 'not measurable'):.3f}); with no effect holds {share(at_null, 'holds'):.3f}, differs "
          f"{share(at_null, 'differs'):.3f}; opposite differs {share(at_opposite, 'differs'):.3f}, holds "
          f"{share(at_opposite, 'holds'):.3f}")
    assert share(at_null, "holds") <= BOUND, f"{claim}: holds with no effect"
    assert share(at_null, "differs") <= BOUND, f"{claim}: differs with no effect"
    assert share(at_opposite, "holds") <= BOUND, f"{claim}: holds under the opposite effect"
    if expect == POWERED:
        assert holds >= POWER, f"{claim}: holds in {holds:.3f} at the paper's effect"
        if room:
            assert share(at_opposite, "differs") >= POWER, f"{claim}: differs in {share(at_opposite, 'differs'):.3f}"
    elif expect == UNDERPOWERED:
        inconclusive = [v for v in at_paper if v.verdict == "inconclusive"]
        said = [v for v in inconclusive if "underpowered at this budget" in v.reason and "needs" in v.reason]
        assert inconclusive and len(said) >= 0.9 * len(inconclusive), f"{claim}: inconclusive without saying why"
        assert promised < POWER, f"{claim}: rows promise power {promised:.2f} but it is not powered"
        assert holds >= promised - 0.1, f"{claim}: holds in {holds:.3f}, rows promise {promised:.2f}"
        if detectable is not None:
            print(f"{claim}: at a detectable effect holds {share(detectable, 'holds'):.3f}")
            assert share(detectable, "holds") >= POWER, f"{claim}: holds in {share(detectable, 'holds'):.3f} at an " \
                                                        "effect this budget detects"
    else:
        unmeasured = [v for v in at_paper if v.verdict == "not measurable"]
        assert len(unmeasured) >= 0.5 * len(at_paper), f"{claim}: mostly measurable"
        assert all(v.reason for v in unmeasured)


def decides(family: Family, claim: str, at_paper: dict[str, list[Verdict]], seed: int, *, expect: str,
            room: bool = True) -> None:
    """:func:`check` of ``claim`` in ``family``: the scenarios with no effect and the opposite one simulated from
    ``seed`` (the family's other claims at the paper's effect), and for an underpowered claim one at an effect its
    budget detects (:func:`detectable_scale`) where that effect is a multiple of the paper's in the lab's units, and
    ``room`` (its metric can show it). A claim sized for the effect it observed has no such scale: its rows plan for
    the size of a noisy estimate, not for the effect the simulation draws."""
    detectable = None
    if expect == UNDERPOWERED and room and all(
            plan.source.startswith("the paper's effect") for v in at_paper[claim] for plan, _ in v.plans):
        detectable = simulate(family, {claim: detectable_scale(at_paper[claim])}, seed + 100)[claim]
    check(claim, at_paper[claim], simulate(family, {claim: 0.0}, seed)[claim],
          simulate(family, {claim: -1.0}, seed + 50)[claim], expect=expect, room=room, detectable=detectable)
