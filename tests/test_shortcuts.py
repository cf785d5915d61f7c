import math

import pytest

from lab.shortcuts import SCHEDULES, alphas, block_scales, branch_scales


@pytest.mark.parametrize("depth", [2, 3, 12, 32])
@pytest.mark.parametrize("alpha_min", [0.0, 0.5, 0.9])
def test_linear_runs_from_one_to_alpha_min_exactly(depth, alpha_min):
    a = alphas("linear", depth, alpha_min)
    assert len(a) == depth and a[0] == 1.0 and a[-1] == pytest.approx(alpha_min, abs=1e-15)
    diffs = [a[i] - a[i + 1] for i in range(depth - 1)]
    assert all(d == pytest.approx(diffs[0]) for d in diffs)  # equal steps
    assert all(d >= 0 for d in diffs)  # monotone non-increasing


@pytest.mark.parametrize("depth", [1, 4, 24])
def test_paper_eq5_is_literal(depth):
    alpha_min = 0.6
    a = alphas("paper_eq5", depth, alpha_min)
    delta = (1 - alpha_min) / depth
    assert a == pytest.approx([1 - delta * l for l in range(depth)])
    assert a[-1] == pytest.approx(alpha_min + (1 - alpha_min) / depth)  # Eq. 5 stops one step short of α_min


def test_sublayer_gives_two_values_per_block_from_one_to_alpha_min():
    a = alphas("sublayer", 12, 0.5)
    assert len(a) == 24 and a[0] == 1.0 and a[-1] == pytest.approx(0.5)
    assert all(x > y for x, y in zip(a, a[1:], strict=False))
    assert alphas("sublayer", 5, 0.3, sublayers_per_block=1) == pytest.approx(alphas("linear", 5, 0.3))


def test_depth_one_does_not_divide_by_zero():
    assert alphas("linear", 1, 0.4) == [0.4]
    assert alphas("paper_eq5", 1, 0.4) == [1.0]
    assert alphas("sublayer", 1, 0.4) == pytest.approx([1.0, 0.4])


def test_fixed_variants():
    assert alphas("identity", 3, 0.2) == [1.0] * 3
    assert alphas("none", 3, 0.2) == [0.0] * 3
    assert alphas("constant", 3, 0.2) == [0.2] * 3
    s = math.sqrt(0.5)
    assert [v for pair in block_scales("scaled_both", 2) for v in pair] == pytest.approx([s] * 4)
    assert [v for pair in block_scales("scaled_branch", 2) for v in pair] == pytest.approx([1.0, s] * 2)
    assert branch_scales("linear", 2) == [1.0, 1.0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown shortcut schedule 'decay'"):
        alphas("decay", 3)
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        alphas("linear", 0)
    with pytest.raises(ValueError, match=r"alpha_min must be in \[0, 1\]"):
        alphas("linear", 3, 1.5)
    assert set(SCHEDULES) >= {"identity", "linear", "paper_eq5", "sublayer", "none", "constant", "scaled_both",
                              "scaled_branch"}
