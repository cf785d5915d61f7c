"""The verdict engine: with no effect it says "holds" at most as often as its significance level, with the paper's
effect at a realistic noise it says so most of the time, and every rule is pinned by a hand-made case."""

import math

import numpy as np
import pytest
from scipy import stats

from lab.reproduce.verdict import ALPHA, Floor, combine, judge, seeds_needed, t_test


def _holds(experiments: np.ndarray, **kwargs) -> float:
    return float(np.mean([judge(row, what="effect", **kwargs).verdict == "holds" for row in experiments]))


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
    assert _holds(rng.normal(effect, noise, (1000, 3)), target=effect) > 0.75


def test_the_statistics_are_students_one_sided_test():
    x = [0.03, 0.05, 0.02, 0.06]
    s = t_test(x)
    reference = stats.ttest_1samp(x, 0.0, alternative="greater")
    assert s.p_value == pytest.approx(reference.pvalue) and s.effect == pytest.approx(np.mean(x))
    interval = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert s.ci95 == pytest.approx(interval) and s.seeds == 4
    assert t_test([0.1, math.nan, 0.2]).seeds == 2  # a seed without a number is left out
    same = t_test([0.2, 0.2, 0.2])
    assert same.p_value == 0.0 and same.ci95 == pytest.approx((0.2, 0.2))  # no spread: its sign decides


def test_each_rule_on_a_hand_made_case():
    clear = judge([0.05, 0.06, 0.055], what="gain")
    assert clear.verdict == "holds" and clear.stats.p_value < ALPHA and "over 3 seeds" in clear.reason
    # the paper's sign in every seed, and noise that could give it by chance: not a verdict the numbers support
    agreeing = judge([0.01, 0.5, 0.02], what="gain", target=0.05)
    assert agreeing.verdict == "inconclusive" and agreeing.needed is not None and "seeds to detect" in agreeing.reason
    assert judge([-0.05, -0.06, -0.055], what="gain").verdict == "differs"  # significant the other way
    ruled_out = judge([0.001, -0.002, 0.0015, 0.0005], what="gain", target=0.07)  # the paper's size is excluded
    assert ruled_out.verdict == "differs" and "excludes the paper's effect" in ruled_out.reason
    assert judge([0.05], what="gain").verdict == "inconclusive"  # one seed is no test against seed noise
    at_chance = judge([0.05, 0.06, 0.055], what="gain", floor=Floor("chance", 0.1, (0.11, 0.12, 0.1), 0.1))
    assert at_chance.verdict == "not measurable" and "is not above chance" in at_chance.reason
    failed = judge([0.05, 0.06, 0.055], what="gain", preconditions=["the samples are not yet digits"])
    assert failed.verdict == "not measurable" and failed.reason == "the samples are not yet digits"
    smoke = judge([0.05, 0.06, 0.055], what="gain", smoke=True)
    assert smoke.verdict == "pipeline only" and smoke.stats.effect == pytest.approx(0.055)
    record = clear.record()
    assert set(record) >= {"effect", "ci95", "p_value", "seeds", "floor", "paper_effect", "seeds_needed"}


def test_seeds_needed_and_combined_verdicts():
    # normal approximation: n = ((z_0.95 + z_0.8) sd / effect)²
    assert seeds_needed(1.0, 1.0) == math.ceil((1.6449 + 0.8416) ** 2)
    assert seeds_needed(0.1, 1.0) == 2 and seeds_needed(1.0, 0.0) is None and seeds_needed(math.nan, 1.0) is None
    holds, noisy, other = (judge(x, what="w") for x in ([1, 1.1, 0.9], [0.1, 1, -0.5], [-1, -1.1, -0.9]))
    assert combine([holds, holds], "both").verdict == "holds"
    assert combine([holds, noisy], "both").verdict == "inconclusive"
    assert combine([holds, other], "both").verdict == "differs"
    unmeasured = judge([1, 1.1, 0.9], what="w", preconditions=["no"])
    assert combine([other, unmeasured], "both").verdict == "not measurable"
