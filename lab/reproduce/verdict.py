"""The one place a reproduction's verdict is decided: an effect, its interval, a test against seed noise, a floor,
the paper's own effect where the lab measures it in the paper's metric and setting, and the paper's family of claims.

Every claim is reduced to per-seed numbers *in the paper's direction*: ``effects[i]`` is what the paper predicts to
be positive, measured with seed i (a paired difference of two arms that share the seed, ``b − a``, or a value
against a null, ``x − null``). :func:`judge` then decides:

* **holds**: a one-sided t-test of "effect > 0" over the seeds (Student's t with ``n − 1`` degrees of freedom) gives
  p < :data:`ALPHA`, and every precondition holds (the arms cleared their floor: chance, a random baseline; a probe
  below its ceiling; samples that are images of the data). With no effect this happens in 5 % of experiments
  whatever the number of seeds: the t-test is exact under Gaussian seed noise.
* **differs**: evidence against the paper. The 95 % interval lies entirely below zero (significantly the other
  way), or entirely below the paper's own effect where the lab measures it in the paper's own metric and setting
  (:class:`Target` with ``same_metric``: the paper's data set and model, the gpu budget), capped by the headroom the
  lab's metric has (a probe cannot pass 1). Both are one test: the one-sided p of "effect < reach" (``p_against``)
  below :data:`AGAINST`, with reach 0, or min(paper's effect, headroom). With the paper's effect as the truth this
  happens in at most 2.5 % of experiments. Where the lab's metric or setting is not the paper's (digits-FD for FID,
  a toy model), the paper's effect is only a note in the reason. An effect in the paper's direction that is
  significant holds, its size ruled out or not (the reason says so).
* **inconclusive**: neither, with how many seeds this seed noise would need to detect the target (80 % power of the
  one-sided t-test at :data:`ALPHA`, from the noncentral t).
* **not measurable**: a precondition failed (which one is said);
* **pending**: a full-scale claim whose runs have not all finished (it says how far they are);
* **pipeline only**: the smoke budget, which only checks that the measurement runs (its numbers are still
  reported, never judged).

A claim measured by several tests (RA1: straight *and* equally spaced) is judged by :func:`combine`: it holds when
every part holds (its p is the largest part's, an intersection-union test at :data:`ALPHA`), and differs when a part
differs once Bonferroni-corrected over the parts; the part that decided is named. A paper's claims form a family:
:func:`holm` adjusts their p-values (Holm's step-down method) and :meth:`Verdict.adjusted` re-decides each verdict
on the adjusted values, so that "holds" (or "differs") anywhere in a paper keeps its 5 % (2.5 %) error rate.
With identical effects over n seeds (no spread to test against) p is the sign test's, 1/2ⁿ, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

ALPHA = 0.05
"""One-sided level of "holds"."""
AGAINST = 0.025
"""One-sided level of "differs": the 95 % interval lies entirely below the reach."""
POWER = 0.8
"""The power at which :func:`seeds_needed` sizes an experiment."""
MOST_SEEDS = 10_000
"""Beyond this :func:`seeds_needed` gives up (None)."""
VERDICTS = ("holds", "inconclusive", "differs", "not measurable", "pipeline only", "pending")
JUDGED = ("holds", "inconclusive", "differs")
"""The verdicts a test decided: the members of a paper's family for :func:`holm`."""


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
class Target:
    """The paper's own effect, and whether the lab's number is in the paper's metric.

    Attributes:
        value: the paper's effect in the lab's units and direction (0.0003: three hundredths of a point of accuracy).
        source: where it comes from, in words (``Table 1, MNIST, ResNet50: Ours 99.32 − Droppath 99.29``).
        headroom: how far the lab's metric can move in the paper's direction from the lab's baseline (a probe at
            0.95 can rise by 0.05); infinite for an unbounded metric.
        same_metric: the lab measures what the paper reports, in its units (an accuracy in points), in its setting
            (its data set and model): then the interval is tested against the reach. Otherwise (digits-FD for FID, a
            few-label probe for a full one, a toy model) the paper's effect, scaled to the lab's baseline, is only a
            note.
    """

    value: float
    source: str
    headroom: float = math.inf
    same_metric: bool = True

    @classmethod
    def accuracy(cls, points: float, source: str, baseline: Sequence[float], ceiling: float = 1.0) -> Target:
        """A difference of accuracies (``points`` as a fraction: 0.071 for 7.1 points), whose headroom is the
        ceiling less the lab's baseline arm (its mean over the seeds)."""
        finite = [v for v in baseline if math.isfinite(v)]
        headroom = ceiling - float(np.mean(finite)) if finite else math.nan
        return cls(points, source, headroom)

    @classmethod
    def note(cls, relative: float, baseline: Sequence[float], source: str, ceiling: float | None = None) -> Target:
        """The paper's relative effect times the lab's baseline, in a metric that is not the paper's: a note. With a
        ``ceiling`` (a probe's 1), the note's headroom is the ceiling less the baseline: a note beyond it is an effect
        no value of the metric can show, and the row says so instead of sizing seeds for it."""
        finite = [v for v in baseline if math.isfinite(v)]
        base = float(np.mean(finite)) if finite else math.nan
        headroom = math.inf if ceiling is None else ceiling - base
        return cls(relative * abs(base), source, headroom, same_metric=False)

    @property
    def reachable(self) -> bool:
        """The paper's effect (a rule's or a note's) lies within what the lab's metric can show."""
        return math.isfinite(self.value) and self.value <= self.headroom

    @property
    def reach(self) -> float:
        """The effect the "differs" rule tests against: the paper's, capped by the headroom (NaN without a rule)."""
        if not self.same_metric or not math.isfinite(self.value) or math.isnan(self.headroom):
            return math.nan
        return min(self.value, self.headroom)

    def record(self) -> dict[str, Any]:
        def plain(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        return {"value": plain(self.value), "source": self.source, "headroom": plain(self.headroom),
                "reach": plain(self.reach), "rule": self.same_metric}


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

    def below(self, reach: float) -> float:
        """One-sided p of "effect < reach" (the t-test shifted by ``reach``; the sign test's 1/2ⁿ with no spread)."""
        return _one_sided(self.effect, self.sd, self.seeds, reach, greater=False)


def _one_sided(mean: float, sd: float, n: int, c: float, *, greater: bool) -> float:
    """p of "mean > c" (``greater``) or "mean < c" from n values of that mean and spread."""
    from scipy import stats  # imported here: scipy.stats takes a second to import

    if n < 2 or not math.isfinite(mean) or not math.isfinite(c):
        return math.nan
    if sd == 0.0:  # every value on the same side: the sign test's p, 1/2ⁿ; none beyond c: no evidence
        beyond = mean > c if greater else mean < c
        return 0.5 ** n if beyond else 1.0
    t = (mean - c) / (sd / math.sqrt(n))
    return float(stats.t.sf(t, n - 1) if greater else stats.t.cdf(t, n - 1))


def t_test(effects: Sequence[float]) -> Stats:
    """The one-sided t-test of ``effects`` (finite values only) against zero mean.

    With identical effects (zero spread) the test is the sign test: p = 1/2ⁿ for n positive effects.
    """
    from scipy import stats

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
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return Stats(mean, (mean - half, mean + half), _one_sided(mean, sd, n, 0.0, greater=True),
                 _one_sided(mean, sd, n, 0.0, greater=False), sd, n)


def power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the one-sided one-sample t-test at ``alpha`` over ``n`` seeds to detect a mean ``effect`` against
    seed noise ``sd``: P(T > t_{1−α, n−1}) with T noncentral t of n − 1 degrees of freedom and noncentrality
    effect √n / sd. With no spread (``sd`` 0) the test is the sign test, whose p over n seeds is 1/2ⁿ: power 1 once
    1/2ⁿ < α (for a positive effect), else 0. NaN where the effect or the noise is unknown or n < 2."""
    from scipy import special  # the distributions' own functions: a power is asked for thousands of times

    if n < 2 or not (math.isfinite(effect) and math.isfinite(sd)):
        return math.nan
    if sd == 0:
        return 1.0 if effect > 0 and 0.5 ** n < alpha else 0.0
    df, nc = n - 1, effect / sd * math.sqrt(n)
    p = float(1.0 - special.nctdtr(df, nc, special.stdtrit(df, 1 - alpha)))
    if math.isfinite(p):
        return p
    from scipy import stats  # nctdtr gives NaN far in its tail (noncentrality 40 at 63 degrees of freedom)

    return float(stats.nct.sf(special.stdtrit(df, 1 - alpha), df, nc))


def power_all(parts: Sequence[tuple[float, float]], n: int, alpha: float = ALPHA) -> float:
    """The chance that every part's one-sided test is significant at ``alpha`` over ``n`` seeds, each part
    ``(effect, sd)`` tested on its own: the product of their :func:`power` (parts taken as independent; a combined
    claim holds only when all its parts do, :func:`combine`)."""
    return float(np.prod([power(effect, sd, n, alpha) for effect, sd in parts])) if parts else math.nan


def seeds_needed(sd: float, target: float, alpha: float = ALPHA, power_: float = POWER) -> int | None:
    """The fewest seeds (at least 2) at which the one-sided t-test at ``alpha`` detects a mean effect ``target``
    against seed noise ``sd`` with probability ``power_`` (:func:`power`, the noncentral t; with no spread, the sign
    test's ⌈log₂(1/α)⌉); None when ``target`` is not positive, ``sd`` unknown, or more than :data:`MOST_SEEDS`
    would be needed."""
    return seeds_needed_all([(target, sd)], alpha, power_)


def seeds_needed_all(parts: Sequence[tuple[float, float]], alpha: float = ALPHA, power_: float = POWER
                     ) -> int | None:
    """The fewest seeds (at least 2) at which every part ``(effect, sd)`` is significant at ``alpha`` with
    probability ``power_`` (:func:`power_all`); None when a part's effect is not positive or its noise unknown, or
    more than :data:`MOST_SEEDS` would be needed. For a claim in a family of m judged claims under Holm, pass
    ``alpha / m``: the threshold its p must clear when it is the family's smallest (the worst case)."""
    if not parts or any(not (math.isfinite(sd) and math.isfinite(e)) or e <= 0 for e, sd in parts):
        return None
    high = 2
    while power_all(parts, high, alpha) < power_:
        if high > MOST_SEEDS:
            return None
        high *= 2
    low = max(2, high // 2)  # power grows with n: the answer lies in (low, high], or is 2
    if power_all(parts, low, alpha) >= power_:
        return low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if power_all(parts, mid, alpha) >= power_ else (mid, high)
    return high if high <= MOST_SEEDS else None


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family's p-values (NaN entries are not members and stay NaN).

    The i-th smallest of m p-values becomes max over j ≤ i of min(1, (m − j + 1) p_(j)); rejecting where the adjusted
    p is below α keeps the chance of any false rejection in the family at most α.
    """
    members = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m, out, running = len(members), [math.nan] * len(p_values), 0.0
    for rank, (p, i) in enumerate(members):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.3g}"


@dataclass(frozen=True)
class Plan:
    """The effect a test is sized for: the paper's, in the lab's units where the lab's metric can show it, else the
    size of the effect the lab observed, in the paper's direction (said as such: could this budget have told an
    effect that large from none, whichever way the lab's own one points?).

    Attributes:
        effect: the effect, in the paper's direction (NaN: none to size for).
        source: where it comes from, in words (``the paper's effect``, ``the effect observed here``).
        unreachable: the paper's effect lies beyond what the lab's metric can show (a probe cannot pass 1), in words;
            empty when it can.
    """

    effect: float
    source: str
    unreachable: str = ""


def plan_for(stats: Stats, target: Target | None) -> Plan:
    """The effect to size a test of ``stats`` for (:class:`Plan`): a rule's reach, a note's value when the metric can
    show it, else the size of the mean effect observed (none when it is 0 or unknown)."""
    size = abs(stats.effect)
    observed = (Plan(size, f"the size of the effect observed here ({_fmt(size)})") if math.isfinite(size) and size > 0
                else Plan(math.nan, ""))
    if target is None or not math.isfinite(target.value) or target.value <= 0:
        return observed
    if target.same_metric and math.isfinite(target.reach) and target.reach > 0:
        capped = f", capped by the headroom {_fmt(target.headroom)}" if target.headroom < target.value else ""
        return Plan(target.reach, f"the paper's effect ({target.source}){capped}")
    if target.reachable:
        return Plan(target.value, f"the paper's effect scaled to the lab's baseline ({target.source})")
    beyond = (f"the paper's effect scaled to the lab's baseline, {_fmt(target.value)} ({target.source}), lies beyond "
              f"what this metric can show (at most {_fmt(target.headroom)} more): no number of seeds detects it")
    return replace(observed, unreachable=beyond)


@dataclass
class Verdict:
    """A claim's verdict and the numbers it rests on (:func:`judge`, :func:`combine`).

    Attributes:
        verdict: one of :data:`VERDICTS`.
        reason: why, in words.
        stats: the t-test of the effects (of the deciding part, for a combined verdict).
        floor: what the arms had to clear.
        target: the paper's effect, its headroom here, and whether it is a rule or a note.
        needed: seeds this noise would need for :attr:`power` of :data:`POWER` at the planned effect, every part of
            a combined claim significant at the family's worst-case Holm threshold α / m (None: no effect to plan
            for, or more than :data:`MOST_SEEDS`).
        parts: the tests a combined verdict rests on.
        p: one-sided p in the paper's direction (a combined verdict: the largest of its parts').
        p_against: one-sided p of "effect < reach" (a combined verdict: the smallest part's times the parts).
        p_holm, p_against_holm: the same after Holm's adjustment within the paper's family (:meth:`adjusted`).
        family: the size of that family (0 before adjustment).
        decided_by: the part whose test decided a combined verdict (its ``what``).
        what: the effect in words.
        plan: the effect a single test is sized for (:func:`plan_for`; a combined verdict's parts carry theirs).
        power: the chance, at this seed count and this noise, that the claim holds if the planned effects are true:
            every part significant at α / m (:func:`power_all`); NaN without a plan.
        sizing: the sentence on power and seeds the reason ends with (empty where there is nothing to size).
    """

    verdict: str
    reason: str
    stats: Stats
    floor: Floor | None = None
    target: Target | None = None
    needed: int | None = None
    parts: list[Verdict] = field(default_factory=list)
    p: float = math.nan
    p_against: float = math.nan
    p_holm: float = math.nan
    p_against_holm: float = math.nan
    family: int = 0
    decided_by: str = ""
    what: str = ""
    plan: Plan = field(default_factory=lambda: Plan(math.nan, ""))
    power: float = math.nan
    sizing: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")

    @property
    def core(self) -> str:
        """The reason without its :attr:`sizing` sentence."""
        return self.reason.removesuffix(f"; {self.sizing}") if self.sizing else self.reason

    @property
    def underpowered(self) -> bool:
        """A judged verdict whose power at its planned effect is below :data:`POWER` (or cannot be planned)."""
        return self.verdict in JUDGED and not self.power >= POWER

    @property
    def plans(self) -> list[tuple[Plan, Stats]]:
        """Per test (the parts of a combined verdict, else this one), its plan and its statistics."""
        return [(q.plan, q.stats) for q in self.parts] if self.parts else [(self.plan, self.stats)]

    def sized(self, family: int) -> Verdict:
        """This verdict with its :attr:`power` and :attr:`needed` at the level α / ``family`` (Holm's threshold for
        the smallest p of a family of that size: the worst case), every part included, and, for an "inconclusive"
        one, the reason ending on the :attr:`sizing` sentence ("underpowered at this budget: power P, needs N
        seeds")."""
        level = ALPHA / max(1, family)
        plans = self.plans
        sized = [(plan.effect, stats.sd) for plan, stats in plans]
        seeds = min((stats.seeds for _, stats in plans), default=0)
        power_ = power_all(sized, seeds, level) if all(math.isfinite(e) for e, _ in sized) else math.nan
        needed = seeds_needed_all(sized, level)
        core = self.core
        if self.verdict not in JUDGED:
            return replace(self, power=power_, needed=needed, sizing="", reason=core)
        level_words = f"{level:.2g}" + (f" (Holm over {family} claims, worst case)" if family > 1 else "")
        at = "; ".join(dict.fromkeys(plan.source for plan, _ in plans if plan.source)) or "no effect to plan for"
        beyond = "; ".join(dict.fromkeys(plan.unreachable for plan, _ in plans if plan.unreachable))
        if not math.isfinite(power_):
            text = f"power unknown at {seeds} seeds: {at}"
        elif power_ >= POWER:
            text = f"power {power_:.2f} at {at}, at level {level_words}"
        else:
            need = (f"needs {needed} seeds" if needed is not None else
                    f"needs more than {MOST_SEEDS:,} seeds")
            text = f"underpowered at this budget: power {power_:.2f}, {need} (at {at}, at level {level_words})"
        if beyond:
            text = f"{text}; {beyond}"
        reason = f"{core}; {text}" if self.verdict == "inconclusive" else core
        return replace(self, power=power_, needed=needed, sizing=text if self.verdict == "inconclusive" else "",
                       reason=reason)

    def adjusted(self, p_holm: float, p_against_holm: float, family: int) -> Verdict:
        """This verdict re-decided on Holm-adjusted p-values within a paper's family of ``family`` judged claims, by
        the rules of :func:`judge`: a "holds" or "differs" that no longer clears its level reads what the adjusted
        values say ("differs" or "inconclusive"), and says so; its power and seeds are sized at that family's
        level (:meth:`sized`)."""
        verdict, reason = self.verdict, self.core
        over = f"once Holm-adjusted over the paper's {family} judged claims"
        if verdict == "holds" and not p_holm < ALPHA:
            verdict = "differs" if p_against_holm < AGAINST else "inconclusive"
            reason = (f"{reason}; not significant {over} (p = {_fmt(p_holm)})"
                      + (f", and the paper's effect is ruled out (p against = {_fmt(p_against_holm)})"
                         if verdict == "differs" else ""))
        elif verdict == "differs" and not p_against_holm < AGAINST:
            verdict, reason = "inconclusive", f"{reason}; not significant {over} (p against = {_fmt(p_against_holm)})"
        return replace(self, verdict=verdict, reason=reason, sizing="", p_holm=p_holm, p_against_holm=p_against_holm,
                       family=family).sized(family)

    def record(self) -> dict[str, Any]:
        """JSON-ready numbers (non-finite as None), the parts' included."""
        def plain(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)

        s = self.stats
        return {"effect": plain(s.effect), "ci95": [plain(s.ci95[0]), plain(s.ci95[1])],
                "p_value": plain(self.p), "p_holm": plain(self.p_holm), "p_against": plain(self.p_against),
                "p_against_holm": plain(self.p_against_holm), "family": self.family, "seeds": s.seeds,
                "floor": self.floor.record() if self.floor else None,
                "target": self.target.record() if self.target else None, "seeds_needed": self.needed,
                "power": plain(self.power), "planned_effect": plain(self.plan.effect) if not self.parts else None,
                "planned_from": (self.plan.source or None) if not self.parts else None,
                "unreachable": (self.plan.unreachable or None) if not self.parts else None,
                "decided_by": self.decided_by or None,
                "parts": [{"what": p.what, "verdict": p.verdict, **{k: v for k, v in p.record().items()
                                                                    if k not in ("parts", "family")}}
                          for p in self.parts]}


def judge(effects: Sequence[float], *, what: str, target: Target | None = None, floor: Floor | None = None,
          preconditions: Sequence[str] = (), smoke: bool = False) -> Verdict:
    """The verdict of per-seed ``effects`` in the paper's direction (see the module docstring).

    Its power and the seeds it needs are sized at α alone (:meth:`Verdict.sized`); :meth:`Verdict.adjusted` sizes
    them again at the level of the paper's family.

    Args:
        effects: per seed, the effect (positive: as the paper says).
        what: the effect in words, for the reason (``α_min 0.6 minus 1.0 in probe accuracy``).
        target: the paper's effect (a rule in the paper's metric, or a note), None for a claim without a size.
        floor: what the arms must clear (failing it is a failed precondition).
        preconditions: the failed preconditions, each in words (empty: all hold).
        smoke: the smoke budget: report the numbers, judge nothing.
    """
    stats = t_test(effects)
    failed = list(preconditions)
    missing = sum(1 for e in effects if not math.isfinite(e))
    if missing:  # a seed whose measurement gave no number is no seed of the test
        failed.append(f"{missing} of {len(effects)} seeds gave no number for {what}")
    if floor is not None and not floor.cleared:
        finite = [v for v in floor.values if math.isfinite(v)]
        mean = _fmt(float(np.mean(finite))) if finite else "n/a"
        failed.append(f"the measured arm ({mean}) is not above {floor.name} ({_fmt(floor.value)}"
                      + (f" + {_fmt(floor.margin)}" if floor.margin else "") + ")")
    reach = target.reach if target is not None else math.nan
    size = math.isfinite(reach) and reach > 0
    p_against = stats.below(reach if size else 0.0)
    plan = plan_for(stats, target)

    def verdict(name: str, reason: str) -> Verdict:
        return Verdict(name, reason, stats, floor, target, None, p=stats.p_value, p_against=p_against, what=what,
                       plan=plan).sized(1)

    if smoke:
        return verdict("pipeline only", "smoke budget: it checks that the measurement runs; its models are too small "
                       "and short to judge the claim")
    if failed:
        return verdict("not measurable", "; ".join(failed))
    words = f"{what}: {_fmt(stats.effect)}"
    if stats.seeds < 2:
        return verdict("inconclusive", f"{words} from one seed, which cannot be tested against seed noise")
    interval = f"95% CI [{_fmt(stats.ci95[0])}, {_fmt(stats.ci95[1])}], one-sided p = {_fmt(stats.p_value)}"
    paper = ""
    if target is not None and size:
        capped = f", capped by the headroom {_fmt(target.headroom)}" if target.headroom < target.value else ""
        paper = f"the paper's effect {_fmt(target.value)} ({target.source}){capped}"
    note = ""
    if target is not None and not target.same_metric and stats.ci95[1] < target.value:
        note = (f"; as a note only (the lab's metric is not the paper's): smaller than the paper's effect scaled to "
                f"the lab's baseline, {_fmt(target.value)} ({target.source})")
    if stats.p_value < ALPHA:
        tail = f"; its size is below {paper}" if paper and p_against < AGAINST else ""
        return verdict("holds", f"{words} ({interval}) over {stats.seeds} seeds{tail}{note}")
    if p_against < AGAINST:
        against = (f"the interval lies below {paper}, which this metric could show" if size
                   else "the interval lies below zero: significantly the other way")
        return verdict("differs", f"{words} ({interval}): {against} (p against = {_fmt(p_against)}) over "
                       f"{stats.seeds} seeds")
    return verdict("inconclusive", f"{words} ({interval}): not significant over {stats.seeds} seeds{note}")


def combine(parts: Sequence[Verdict], what: str) -> Verdict:
    """One verdict from several tests of one claim (see the module docstring): pipeline only if any is; holds if all
    hold; differs if a part's p against, times the number of parts, is below :data:`AGAINST`; else not measurable if
    any part is; else inconclusive. Its effect and interval are the deciding part's, its p the largest part's and its
    p against the smallest part's times the parts (Bonferroni); its power is that of every part at once."""
    k = len(parts)
    p = max((q.p for q in parts), default=math.nan) if all(math.isfinite(q.p) for q in parts) else math.nan
    against = [q.p_against for q in parts if q.verdict in JUDGED and math.isfinite(q.p_against)]
    p_against = min(1.0, k * min(against)) if against else math.nan
    names = [q.verdict for q in parts]
    if not parts:
        raise ValueError(f"{what}: a combined verdict needs at least one part")
    if "pipeline only" in names:
        decider, verdict = parts[0], "pipeline only"
    elif all(n == "holds" for n in names):  # as judge: an effect in the paper's direction wins over its size
        decider, verdict = max(parts, key=lambda q: q.p), "holds"
    elif math.isfinite(p_against) and p_against < AGAINST:
        decider = min((q for q in parts if q.verdict in JUDGED), key=lambda q: q.p_against)
        verdict = "differs"
    elif "not measurable" in names:
        decider, verdict = parts[names.index("not measurable")], "not measurable"
    else:
        decider, verdict = next(q for q in parts if q.verdict != "holds"), "inconclusive"
    bonferroni = (f" (Bonferroni over {k} parts: p against = {_fmt(p_against)})" if verdict == "differs" else
                  f" (each part's p below {ALPHA:g} is needed)" if verdict == "holds" and k > 1 else "")
    reason = (f"{what}: decided by {decider.what}{bonferroni}; "  # the claim is sized as a whole, not part by part
              + "; ".join(dict.fromkeys(f"[{q.verdict}] {q.core}" for q in parts)))
    return Verdict(verdict, reason, decider.stats, decider.floor, decider.target, None, list(parts), p,
                   p_against, decided_by=decider.what, what=what).sized(1)
