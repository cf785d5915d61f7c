"""The one place a reproduction's verdict is decided: an effect, its interval, a test against seed noise, a floor.

Every claim is reduced to per-seed numbers *in the paper's direction*: ``effects[i]`` is what the paper predicts to
be positive, measured with seed i (a paired difference of two arms that share the seed, ``b − a``, or a value
against a null, ``x − null``). :func:`judge` then decides:

* **holds**: the mean effect is positive and a one-sided t-test against zero effect over the seeds gives
  p < :data:`ALPHA` (with ``n`` seeds, Student's t with ``n − 1`` degrees of freedom; paired when the arms share
  seeds), and every precondition holds (the arms cleared their floor: chance, a random baseline, the network
  without skips; a probe below its ceiling; samples that are images of the data);
* **differs**: the test in the other direction gives p < :data:`ALPHA`, or the 95 % interval lies entirely below
  the paper's own effect (its relative effect times the lab's baseline), so the paper's effect size is ruled out;
* **inconclusive**: neither, with how many seeds this seed noise would need to detect the paper's relative effect
  (80 % power at one-sided α = 0.05, normal approximation);
* **not measurable**: a precondition failed (which one is said);
* **pending**: a full-scale claim whose runs have not all finished (it says how far they are);
* **pipeline only**: the smoke budget, which only checks that the measurement runs (its numbers are still
  reported, never judged).

With no effect at all and Gaussian seed noise, "holds" comes out in 5 % of experiments whatever the number of seeds
(the t-test is exact); agreement of signs across three seeds, the rule this replaces, happens one time in eight. A
claim measured by several tests (RA1: straight *and* equally spaced) is judged by :func:`combine`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALPHA = 0.05
"""One-sided significance level of every test."""
POWER = 0.8
"""The power at which :func:`seeds_needed` sizes an experiment."""
VERDICTS = ("holds", "inconclusive", "differs", "not measurable", "pipeline only", "pending")


@dataclass(frozen=True)
class Floor:
    """What an arm must clear for its measurement to mean anything: chance for a probe, a random baseline for an
    alignment score, the network without skips.

    Attributes:
        name: what the floor is, e.g. ``chance (1/10)``.
        value: the floor.
        values: per seed, the values that must lie above it (an arm's probe accuracy).
        margin: how far above the floor their mean must lie (in the values' units).
    """

    name: str
    value: float
    values: tuple[float, ...]
    margin: float = 0.0

    @property
    def cleared(self) -> bool:
        finite = [v for v in self.values if math.isfinite(v)]
        return bool(finite) and float(np.mean(finite)) > self.value + self.margin

    def record(self) -> dict[str, Any]:
        finite = [v for v in self.values if math.isfinite(v)]
        return {"name": self.name, "value": self.value, "margin": self.margin,
                "mean": float(np.mean(finite)) if finite else None, "cleared": self.cleared}


@dataclass(frozen=True)
class Stats:
    """A one-sample t-test of per-seed effects against zero.

    Attributes:
        effect: mean effect over the seeds (positive: the paper's direction).
        ci95: two-sided 95 % confidence interval of the mean effect.
        p_value: one-sided p of "effect > 0" (NaN with one seed).
        p_other: one-sided p of "effect < 0".
        sd: the effects' standard deviation across seeds (ddof 1; NaN with one seed).
        seeds: number of seeds.
    """

    effect: float
    ci95: tuple[float, float]
    p_value: float
    p_other: float
    sd: float
    seeds: int


def t_test(effects: Sequence[float]) -> Stats:
    """The one-sided t-test of ``effects`` (finite values only) against zero mean.

    With identical effects (zero spread) the test is decided by their sign alone: p = 0 for a positive one.
    """
    from scipy import stats  # imported here: scipy.stats takes a second to import

    x = np.asarray([e for e in effects if math.isfinite(e)], dtype=np.float64)
    n = len(x)
    if n == 0:
        return Stats(math.nan, (math.nan, math.nan), math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n == 1:
        return Stats(mean, (math.nan, math.nan), math.nan, math.nan, math.nan, 1)
    sd = float(x.std(ddof=1))
    if sd <= 1e-12 * abs(mean):  # identical effects, up to the rounding of their mean
        sd = 0.0
    se = sd / math.sqrt(n)
    if se == 0.0:
        p = 0.0 if mean > 0 else 1.0 if mean < 0 else 0.5
        return Stats(mean, (mean, mean), p, 0.0 if mean < 0 else 1.0 if mean > 0 else 0.5, 0.0, n)
    t = mean / se
    half = float(stats.t.ppf(0.975, n - 1)) * se
    return Stats(mean, (mean - half, mean + half), float(stats.t.sf(t, n - 1)), float(stats.t.cdf(t, n - 1)), sd, n)


def seeds_needed(sd: float, target: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Seeds a paired experiment needs to detect a mean effect ``target`` against seed noise ``sd`` (one-sided
    ``alpha``, ``power``; normal approximation, at least 2); None when ``target`` is not positive or ``sd`` unknown.
    """
    from scipy import stats

    if not (math.isfinite(sd) and math.isfinite(target)) or target <= 0:
        return None
    if sd == 0:
        return 2
    z = float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(power))
    return max(2, math.ceil((z * sd / target) ** 2))


@dataclass
class Verdict:
    """A claim's verdict and the numbers it rests on (:func:`judge`)."""

    verdict: str
    reason: str
    stats: Stats
    floor: Floor | None = None
    target: float | None = None  # the paper's effect in the lab's units (its relative effect × the lab's baseline)
    needed: int | None = None  # seeds this noise would need to detect ``target``
    parts: list[Verdict] = field(default_factory=list)  # the tests a combined verdict rests on

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")

    def record(self) -> dict[str, Any]:
        """JSON-ready numbers (non-finite as None)."""
        def plain(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)

        s = self.stats
        return {"effect": plain(s.effect), "ci95": [plain(s.ci95[0]), plain(s.ci95[1])],
                "p_value": plain(s.p_value), "seeds": s.seeds, "floor": self.floor.record() if self.floor else None,
                "paper_effect": plain(self.target), "seeds_needed": self.needed}


def _fmt(v: float) -> str:
    return f"{v:.3g}" if math.isfinite(v) else "n/a"


def judge(effects: Sequence[float], *, what: str, target: float | None = None, floor: Floor | None = None,
          preconditions: Sequence[str] = (), smoke: bool = False) -> Verdict:
    """The verdict of per-seed ``effects`` in the paper's direction (see the module docstring).

    Args:
        effects: per seed, the effect (positive: as the paper says).
        what: the effect in words, for the reason (``α_min 0.6 minus 1.0 in probe accuracy``).
        target: the paper's effect in the lab's units (its relative effect times the lab's baseline), for the
            "ruled out" rule and the seeds needed; None for a claim without a size.
        floor: what the arms must clear (failing it is a failed precondition).
        preconditions: the failed preconditions, each in words (empty: all hold).
        smoke: the smoke budget: report the numbers, judge nothing.
    """
    stats = t_test(effects)
    failed = list(preconditions)
    if floor is not None and not floor.cleared:
        finite = [v for v in floor.values if math.isfinite(v)]
        mean = _fmt(float(np.mean(finite))) if finite else "n/a"
        failed.append(f"the measured arm ({mean}) is not above {floor.name} ({_fmt(floor.value)}"
                      + (f" + {_fmt(floor.margin)}" if floor.margin else "") + ")")
    needed = seeds_needed(stats.sd, target) if target is not None else None
    if smoke:
        return Verdict("pipeline only", "smoke budget: it checks that the measurement runs; its models are too small "
                       "and short to judge the claim", stats, floor, target, needed)
    if failed:
        return Verdict("not measurable", "; ".join(failed), stats, floor, target, needed)
    words = f"{what}: {_fmt(stats.effect)}"
    if stats.seeds < 2:
        return Verdict("inconclusive", f"{words} from one seed, which cannot be tested against seed noise", stats,
                       floor, target, needed)
    interval = f"95% CI [{_fmt(stats.ci95[0])}, {_fmt(stats.ci95[1])}], one-sided p = {_fmt(stats.p_value)}"
    if stats.effect > 0 and stats.p_value < ALPHA:
        return Verdict("holds", f"{words} ({interval}) over {stats.seeds} seeds", stats, floor, target, needed)
    if stats.p_other < ALPHA:
        return Verdict("differs", f"{words} ({interval}): significantly the other way over {stats.seeds} seeds",
                       stats, floor, target, needed)
    if target is not None and target > 0 and stats.ci95[1] < target:
        return Verdict("differs", f"{words} ({interval}): the interval excludes the paper's effect, "
                       f"{_fmt(target)} in these units", stats, floor, target, needed)
    more = (f"; this seed noise would need about {needed} seeds to detect the paper's relative effect "
            f"({_fmt(target)} here)" if needed else "")
    return Verdict("inconclusive", f"{words} ({interval}): not significant over {stats.seeds} seeds{more}", stats,
                   floor, target, needed)


def combine(parts: Sequence[Verdict], what: str) -> Verdict:
    """One verdict from several tests of one claim: not measurable if any is, differs if any does, holds if all do,
    else inconclusive; its numbers are the first test's."""
    names = [p.verdict for p in parts]
    for verdict in ("pipeline only", "not measurable", "differs"):
        if verdict in names:
            break
    else:
        verdict = "holds" if all(n == "holds" for n in names) else "inconclusive"
    reason = f"{what}: " + "; ".join(dict.fromkeys(p.reason for p in parts))  # a shared precondition, said once
    first = parts[0]
    return Verdict(verdict, reason, first.stats, first.floor, first.target, first.needed, list(parts))
