"""The verdict engine: with no effect it says "holds" at most as often as its significance level, with the paper's
effect at a realistic noise it says so most of the time, and every rule is pinned by a hand-made case."""

import math

import numpy as np
import pytest
from scipy import stats

from lab.reproduce.verdict import (
    AGAINST,
    ALPHA,
    Floor,
    Target,
    combine,
    holm,
    judge,
    power,
    seeds_needed,
    t_test,
)


def _holds(experiments: np.ndarray, **kwargs) -> float:
    return float(np.mean([judge(row, what="effect", **kwargs).verdict == "holds" for row in experiments]))


def _simulated_power(effect: float, sd: float, n: int, draws: int, rng: np.random.Generator) -> float:
    """Share of ``draws`` experiments of n Gaussian seeds whose one-sided t-test at ALPHA rejects "effect ≤ 0"."""
    x = rng.normal(effect, sd, (draws, n))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(t > stats.t.ppf(1 - ALPHA, n - 1)))


def test_with_no_effect_holds_comes_out_at_most_five_percent_of_the_time():
    """1,000 simulated experiments at 3 seeds with no effect (Gaussian seed noise, and a heavy-tailed one): the rule
    it replaces ("the sign agrees in every seed") said "holds" one time in eight."""
    rng = np.random.default_rng(0)
    gaussian = rng.normal(0.0, 1.0, (1000, 3))
    assert _holds(gaussian) <= 0.05
    assert _holds(rng.standard_t(3, (1000, 3))) <= 0.05
    assert np.mean((gaussian > 0).all(axis=1)) > 0.1  # the sign rule: about 1/8


def test_with_the_papers_effect_at_a_realistic_noise_holds_most_of_the_time():
    """Table 2's gain, +7.1 points on 76.5 (relative 9.3 %), over 3 seeds whose paired differences scatter by 3
    points."""
    rng = np.random.default_rng(1)
    effect, noise = 0.071, 0.03
    assert _holds(rng.normal(effect, noise, (1000, 3)), target=Target(effect, "Table 2: 83.6 − 76.5")) > 0.75


def test_the_statistics_are_students_one_sided_test():
    """Hand-made effects (no paper's numbers): p, the p against, the interval and the seed count are scipy's one-sample
    t-test and t interval."""
    x = [0.03, 0.05, 0.02, 0.06]
    s = t_test(x)
    reference = stats.ttest_1samp(x, 0.0, alternative="greater")
    assert s.p_value == pytest.approx(reference.pvalue) and s.effect == pytest.approx(np.mean(x))
    other = stats.ttest_1samp(x, 0.0, alternative="less")
    assert s.p_other == pytest.approx(other.pvalue)
    assert s.below(0.07) == pytest.approx(stats.ttest_1samp(x, 0.07, alternative="less").pvalue)
    interval = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert s.ci95 == pytest.approx(interval) and s.seeds == 4
    assert t_test([0.1, math.nan, 0.2]).seeds == 2  # a seed without a number is left out
    same = t_test([0.2, 0.2, 0.2])
    assert same.ci95 == pytest.approx((0.2, 0.2))  # no spread: a point interval


def test_identical_effects_over_three_seeds_give_the_sign_tests_one_eighth():
    """Three identical positive effects: no spread to test against, so p is the sign test's 1/2³ = 0.125 (never 0),
    which is not significant: the verdict is "inconclusive", not "holds"."""
    same = t_test([0.2, 0.2, 0.2])
    assert same.p_value == 0.125 and same.sd == 0.0
    assert same.p_other == 1.0  # none of them below zero: no evidence the other way
    assert t_test([-0.2, -0.2, -0.2]).p_other == 0.125
    assert t_test([0.1, 0.1, 0.1, 0.1, 0.1]).p_value == 1 / 32
    verdict = judge([0.2, 0.2, 0.2], what="gain")
    assert verdict.p == 0.125 and verdict.verdict == "inconclusive"


def test_each_rule_on_a_hand_made_case():
    """Each verdict on hand-made effects; the paper-sized targets are stand-ins of +5 and +7 points (the size of
    Table 2's +7.1)."""
    clear = judge([0.05, 0.06, 0.055], what="gain")
    assert clear.verdict == "holds" and clear.stats.p_value < ALPHA and "over 3 seeds" in clear.reason
    # the paper's sign in every seed, and noise that could give it by chance: not a verdict the numbers support
    agreeing = judge([0.01, 0.5, 0.02], what="gain", target=Target(0.05, "a paper's +5 points"))
    assert agreeing.verdict == "inconclusive" and agreeing.needed == seeds_needed(agreeing.stats.sd, 0.05)
    assert f"underpowered at this budget: power {agreeing.power:.2f}, needs {agreeing.needed} seeds" in agreeing.reason
    assert judge([-0.05, -0.06, -0.055], what="gain").verdict == "differs"  # significant the other way
    # the paper's 7 points, in the paper's metric and with the headroom for them, lie above the whole interval
    ruled_out = judge([0.001, -0.002, 0.0015, 0.0005], what="gain", target=Target(0.07, "a paper's +7 points"))
    assert ruled_out.verdict == "differs" and "the interval lies below the paper's effect" in ruled_out.reason
    assert ruled_out.p_against < AGAINST and ruled_out.stats.ci95[1] < 0.07
    # the same numbers against a paper's effect the metric has no headroom for: the reach is the headroom
    capped = judge([0.001, -0.002, 0.0015, 0.0005], what="gain", target=Target(0.07, "a paper", headroom=0.004))
    assert capped.target.reach == 0.004 and capped.verdict == "differs" and "capped by the headroom" in capped.reason
    tight = judge([0.001, -0.002, 0.0015, 0.0005], what="gain", target=Target(0.07, "a paper", headroom=0.002))
    assert tight.verdict == "inconclusive"  # 0.002 lies inside the interval: the lab could not have shown more
    assert judge([0.05], what="gain").verdict == "inconclusive"  # one seed is no test against seed noise
    at_chance = judge([0.05, 0.06, 0.055], what="gain", floor=Floor("chance", 0.1, (0.11, 0.12, 0.1), 0.1))
    assert at_chance.verdict == "not measurable" and "is not above chance" in at_chance.reason
    failed = judge([0.05, 0.06, 0.055], what="gain", preconditions=["the samples are not yet digits"])
    assert failed.verdict == "not measurable" and failed.reason == "the samples are not yet digits"
    smoke = judge([0.05, 0.06, 0.055], what="gain", smoke=True)
    assert smoke.verdict == "pipeline only" and smoke.stats.effect == pytest.approx(0.055)
    record = clear.record()
    assert set(record) >= {"effect", "ci95", "p_value", "p_holm", "p_against", "p_against_holm", "family", "seeds",
                           "floor", "target", "seeds_needed", "decided_by", "parts"}
    assert ruled_out.record()["target"] == {"value": 0.07, "source": "a paper's +7 points", "headroom": None,
                                            "reach": 0.07, "rule": True}


def test_a_note_target_never_says_differs_unless_the_interval_lies_below_zero():
    """``Target.note``: the paper's relative effect (Table 3a, (83.6 − 61.5) / 61.5) times the lab's baseline of a
    metric that is not the paper's. An interval far below it, but not below zero, is "inconclusive" (the note is in
    the reason); the same numbers against a rule in the paper's metric would read "differs"."""
    relative = (83.6 - 61.5) / 61.5
    note = Target.note(relative, [0.84, 0.85, 0.83], "Table 3a: 83.6 with U-Net skips − 61.5 without")
    assert not note.same_metric and note.value == pytest.approx(relative * 0.84) and math.isnan(note.reach)
    small = [0.001, -0.002, 0.0015, 0.0005]
    noted = judge(small, what="probe", target=note)
    assert noted.verdict == "inconclusive" and "as a note only" in noted.reason
    assert judge(small, what="probe", target=Target(note.value, "a rule")).verdict == "differs"
    below = judge([-0.05, -0.06, -0.055], what="probe", target=note)
    assert below.verdict == "differs" and "significantly the other way" in below.reason
    assert judge([0.05, 0.06, 0.055], what="probe", target=note).verdict == "holds"  # a note does not stop "holds"
    rng = np.random.default_rng(2)  # small effects, far below the note: "differs" exactly when the CI is below zero
    verdicts = [judge(row, what="probe", target=note) for row in rng.normal(0.01, 0.02, (200, 3))]
    assert all((v.verdict == "differs") == (v.stats.ci95[1] < 0) for v in verdicts)
    assert all(v.stats.ci95[1] < note.value for v in verdicts)  # every interval lies below the note


def test_seeds_needed_is_the_noncentral_t_of_the_one_sided_t_test():
    """80 % power of the one-sided t-test at 0.05, from the noncentral t, checked against scipy directly and by Monte
    Carlo; the normal approximation it replaces, n = ((z_0.95 + z_0.8) sd / effect)², undersizes large effects."""

    def independent(effect: float, sd: float) -> int:
        n = 2
        while stats.nct.sf(stats.t.ppf(0.95, n - 1), n - 1, effect / sd * math.sqrt(n)) < 0.8:
            n += 1
        return n

    n = seeds_needed(1.0, 1.0)
    assert n == independent(1.0, 1.0) == 8
    assert power(1.0, 1.0, n) >= 0.8 > power(1.0, 1.0, n - 1)
    rng = np.random.default_rng(3)
    assert _simulated_power(1.0, 1.0, n, 20_000, rng) >= 0.78
    assert _simulated_power(1.0, 1.0, n - 1, 20_000, rng) < 0.8
    for sd, effect in ((0.03, 0.071), (0.5, 0.2), (2.0, 1.0)):
        assert seeds_needed(sd, effect) == independent(effect, sd)
    # effect / sd = 2: the normal approximation says 2 seeds, where the t-test has power about 0.34
    normal = math.ceil(((stats.norm.ppf(0.95) + stats.norm.ppf(0.8)) * 1.0 / 2.0) ** 2)
    assert normal == 2 and power(2.0, 1.0, 2) == pytest.approx(0.34, abs=0.02)
    assert _simulated_power(2.0, 1.0, 2, 20_000, rng) == pytest.approx(0.34, abs=0.02)
    assert seeds_needed(1.0, 2.0) == independent(2.0, 1.0) > normal
    # no spread: the sign test, whose p with n seeds is 1/2ⁿ, needs 5 seeds to go below 0.05
    assert seeds_needed(0.0, 1.0) == 5 and 0.5 ** 5 < 0.05 <= 0.5 ** 4
    assert seeds_needed(1.0, 0.0) is None and seeds_needed(math.nan, 1.0) is None


def test_holm_against_a_hand_computation():
    """Sorted 0.01, 0.03, 0.04, 0.5 become 4 × 0.01, 3 × 0.03, max(0.09, 2 × 0.04), max(0.09, 0.5)."""
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    adjusted = holm([0.2, math.nan, 0.01])  # NaN is not a member: a family of two
    assert adjusted[0] == pytest.approx(0.2) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0]) and holm([]) == []


def test_holm_adjustment_re_decides_a_verdict():
    """A "holds" whose Holm-adjusted p is 0.05 or more reads "inconclusive" (and says why); one below stays; a
    "differs" likewise against the 0.025 level."""
    holds = judge([0.05, 0.06, 0.055], what="gain")
    assert holds.verdict == "holds"
    lost = holds.adjusted(0.05, 1.0, 3)
    assert lost.verdict == "inconclusive" and "Holm-adjusted" in lost.reason
    assert lost.p_holm == 0.05 and lost.family == 3 and lost.p == holds.p
    kept = holds.adjusted(0.049, 1.0, 3)
    assert kept.verdict == "holds" and kept.reason == holds.reason and kept.family == 3
    differs = judge([-0.05, -0.06, -0.055], what="gain")
    assert differs.verdict == "differs"
    assert differs.adjusted(1.0, 0.03, 2).verdict == "inconclusive"
    assert differs.adjusted(1.0, 0.02, 2).verdict == "differs"
    assert holds.record()["family"] == 0 and kept.record()["family"] == 3


def test_combined_verdicts():
    """``combine``: "holds" only when every part holds; "differs" when one part differs once Bonferroni-corrected,
    named in ``decided_by``."""
    holds = judge([1, 1.1, 0.9], what="first")
    second = judge([2, 2.1, 1.9], what="second")
    noisy = judge([0.1, 1, -0.5], what="noisy")
    other = judge([-1, -1.1, -0.9], what="the other way")
    assert 3 * other.p_against < AGAINST
    both = combine([holds, second], "both")
    assert both.verdict == "holds" and both.p == max(holds.p, second.p) and both.decided_by == "first"
    assert combine([holds, noisy], "both").verdict == "inconclusive"
    against = combine([holds, other, noisy], "all three")
    assert against.verdict == "differs" and against.decided_by == "the other way"
    assert against.p_against == pytest.approx(3 * other.p_against) and "decided by the other way" in against.reason
    unmeasured = judge([1, 1.1, 0.9], what="w", preconditions=["no"])
    assert combine([holds, unmeasured], "both").verdict == "not measurable"
    assert combine([other, unmeasured], "both").verdict == "differs"  # a measured part significantly the other way
    # a part that differs on its own (p against 0.02) but not once corrected over two parts
    weak = judge([-0.3, -1.2, -0.5, -0.9], what="weak")
    assert weak.verdict == "differs" and AGAINST / 2 < weak.p_against < AGAINST
    assert combine([holds, weak], "both").verdict == "inconclusive"
    assert combine([holds, judge([1, 1.1, 0.9], what="s", smoke=True)], "both").verdict == "pipeline only"


def test_the_paper_s_direction_wins_over_its_size_and_holm_re_decides_by_the_same_rules():
    """A combined claim whose parts all hold holds, even when one part's size falls short of the paper's (as
    ``judge``: holds, with the shortfall said); a "holds" that Holm's adjustment takes away reads "differs" when the
    adjusted p against still rules the paper's effect out, else "inconclusive"; a seed without a number is named
    and makes the test not measurable rather than quietly one seed fewer."""
    short = judge([0.010, 0.011, 0.012], what="small", target=Target(0.07, "paper"))
    assert short.verdict == "holds" and "its size is below" in short.reason and short.p_against < AGAINST
    big = judge([1.0, 1.1, 0.9], what="big")
    assert combine([big, short], "both").verdict == "holds"
    assert short.adjusted(0.2, 0.001, 3).verdict == "differs"
    assert short.adjusted(0.2, 0.2, 3).verdict == "inconclusive"
    assert short.adjusted(0.01, 0.001, 3).verdict == "holds"
    gap = judge([0.05, math.nan, 0.06], what="gain")
    assert gap.verdict == "not measurable" and "1 of 3 seeds gave no number for gain" in gap.reason
    with pytest.raises(ValueError, match="at least one part"):
        combine([], "nothing")


def test_power_and_seeds_account_for_holm_and_every_part_of_a_combined_claim():
    """Sized at the family's worst-case Holm level α / m, a claim needs more seeds than alone: exactly the noncentral
    t's answer at that level; a combined claim holds only when every part does, so its power is the product of its
    parts' and it needs at least as many seeds as its hardest part. The issue's example: 2–3 seeds "needed" alone
    where a family of 9 needs 5–6."""
    from lab.reproduce.verdict import POWER, power_all, seeds_needed_all

    alone = seeds_needed(1.0, 2.0)
    in_nine = seeds_needed_all([(2.0, 1.0)], ALPHA / 9)
    assert alone == 4 and in_nine == 7 > alone
    assert power(2.0, 1.0, in_nine, ALPHA / 9) >= POWER > power(2.0, 1.0, in_nine - 1, ALPHA / 9)
    assert power_all([(2.0, 1.0), (2.0, 1.0)], 5, ALPHA) == pytest.approx(power(2.0, 1.0, 5) ** 2)
    both = seeds_needed_all([(2.0, 1.0), (1.0, 1.0)], ALPHA)
    assert both >= seeds_needed(1.0, 1.0) and power_all([(2.0, 1.0), (1.0, 1.0)], both) >= POWER
    assert power_all([(2.0, 1.0), (1.0, 1.0)], both - 1) < POWER
    assert seeds_needed_all([(2.0, 1.0), (-1.0, 1.0)]) is None  # a part planned against the paper: no seed count
    rng = np.random.default_rng(4)  # the product is what happens: simulated with independent parts
    x = rng.normal(2.0, 1.0, (20_000, 2, 5))
    t = x.mean(axis=2) / (x.std(axis=2, ddof=1) / math.sqrt(5))
    simulated = float(np.mean((t > stats.t.ppf(1 - ALPHA, 4)).all(axis=1)))
    assert simulated == pytest.approx(power_all([(2.0, 1.0), (2.0, 1.0)], 5), abs=0.015)


def test_a_verdict_is_sized_again_in_its_family():
    """judge sizes at α alone; adjusted re-sizes at α / m and rewrites the sentence it ends with (not appends a
    second); a combined verdict's power is its parts' product; a well-powered inconclusive row does not say
    underpowered, a holds row carries its power without a sentence."""
    rng = np.random.default_rng(5)
    effects = list(rng.normal(0.1, 0.2, 4))
    alone = judge(effects, what="gain", target=Target(0.2, "a paper's +20 points"))
    assert alone.verdict == "inconclusive" and alone.plan.effect == 0.2 and "paper's effect" in alone.plan.source
    assert alone.power == pytest.approx(power(0.2, alone.stats.sd, 4))
    assert alone.needed == seeds_needed(alone.stats.sd, 0.2)
    nine = alone.adjusted(0.5, 1.0, 9)
    assert nine.power == pytest.approx(power(0.2, alone.stats.sd, 4, ALPHA / 9)) and nine.power < alone.power
    assert nine.needed == seeds_needed(alone.stats.sd, 0.2, ALPHA / 9) > alone.needed
    assert nine.reason.count("underpowered at this budget") == 1 and f"needs {nine.needed} seeds" in nine.reason
    assert f"needs {alone.needed} seeds" not in nine.reason.split("; underpowered")[1]
    first, second = judge([1.0, 1.2, 0.9], what="a"), judge([0.5, 0.9, 0.3], what="b")
    both = combine([first, second], "both")
    assert both.power == pytest.approx(first.power * second.power)
    assert both.plan.effect != both.plan.effect and [p.effect for p, _ in both.plans] == [first.stats.effect,
                                                                                          second.stats.effect]
    assert first.verdict == "holds" and first.sizing == "" and first.power > 0
    sure = judge([0.05, -0.02, 0.01, 0.04, -0.03, 0.02], what="gain", target=Target(5.0, "a note", same_metric=False))
    assert sure.verdict == "inconclusive" and sure.power > 0.99 and "underpowered" not in sure.reason
    assert f"power {sure.power:.2f}" in sure.reason


def test_a_note_beyond_the_metrics_reach_gets_no_seed_count():
    """A note of 0.30 on a probe at 0.84 (ceiling 1: 0.16 of room) cannot be detected by any number of seeds: the row
    says so, and sizes for the size of the effect it observed instead; an effect observed against the paper is sized
    by its size, in the paper's direction."""
    note = Target.note(0.36, [0.84, 0.83, 0.85], "Table 3a", ceiling=1.0)
    assert note.headroom == pytest.approx(0.16) and not note.reachable
    v = judge([0.01, 0.03, -0.01, 0.02], what="probe", target=note)
    assert v.plan.effect == pytest.approx(v.stats.effect) and "observed" in v.plan.source
    assert "lies beyond what this metric can show" in v.reason and "no number of seeds detects it" in v.reason
    against = judge([-0.01, -0.03, 0.01, -0.02], what="probe")
    assert against.plan.effect == pytest.approx(0.0125) and "size of the effect observed" in against.plan.source
    assert against.power == pytest.approx(power(0.0125, against.stats.sd, 4))
    assert Target.note(0.1, [0.84], "x", ceiling=1.0).reachable
    assert judge([0.01, 0.03, -0.01, 0.02], what="p", target=Target.note(0.1, [0.84], "x", ceiling=1.0)).plan.effect \
        == pytest.approx(0.084)


def test_power_far_in_the_noncentral_tail_is_a_number():
    """The noncentral t's own function gives NaN far in its tail; power there is scipy.stats' (about 1), and the seeds
    a combined claim needs are not cut short by it."""
    assert power(0.4748, 0.093, 64, ALPHA / 7) == pytest.approx(1.0)
    from lab.reproduce.verdict import seeds_needed_all

    assert seeds_needed_all([(0.79, 0.15), (0.0007, 0.14), (0.47, 0.093)], ALPHA / 7) is None
