import math

import numpy as np
import pytest
from bokeh.models import Range1d

from lab.ui.views.ranges import finite_range, set_range


def test_margin_is_a_share_of_the_span():
    assert finite_range([0.0, 10.0]) == pytest.approx((-0.5, 10.5))
    assert finite_range([0.0, 10.0], pad=0.02, least=1.0) == pytest.approx((-1.0, 11.0))  # at least `least`


def test_values_that_are_not_finite_are_left_out():
    assert finite_range([1.0, np.inf, 3.0, -np.inf, np.nan]) == pytest.approx((0.9, 3.1))
    assert finite_range(np.array([[1.0, np.nan], [2.0, 3.0]]), [np.inf, 5.0]) == pytest.approx((0.8, 5.2))


def test_nothing_finite_gives_the_empty_range():
    assert finite_range([np.nan, np.nan]) == (0.0, 1.0)
    assert finite_range([np.inf, -np.inf]) == (0.0, 1.0)
    assert finite_range() == (0.0, 1.0)
    assert finite_range([np.nan], empty=None) is None


def test_a_single_value_gets_a_margin_of_its_size_and_zero_its_point_margin():
    assert finite_range([2.0]) == pytest.approx((1.9, 2.1))
    assert finite_range([-4.0, -4.0]) == pytest.approx((-4.2, -3.8))
    assert finite_range([0.0]) == pytest.approx((-0.05, 0.05))
    assert finite_range([0.0], point=0.5) == pytest.approx((-0.5, 0.5))
    assert finite_range([7.0], pad=0.02, least=1.0) == pytest.approx((6.0, 8.0))


def test_floor_extends_the_range_down():
    assert finite_range([2.0, 4.0], floor=0.0) == pytest.approx((-0.2, 4.2))
    assert finite_range([-1.0, 4.0], floor=0.0) == pytest.approx((-1.25, 4.25))  # already below: unchanged


def test_log_fits_positive_values_in_decades():
    lo, hi = finite_range([0.01, 1.0, 0.0, -3.0, np.nan], pad=0.0, least=math.log10(1.5), log=True)
    assert (lo, hi) == pytest.approx((0.01 / 1.5, 1.5))
    assert finite_range([0.0, -1.0], log=True, empty=None) is None
    assert finite_range([10.0], least=0.05, log=True) == pytest.approx((10 ** 0.95, 10 ** 1.05))


def test_set_range_moves_a_range_and_none_keeps_it():
    rng = Range1d(0, 1)
    set_range(rng, (2.0, 3.0))
    assert (rng.start, rng.end) == (2.0, 3.0)
    set_range(rng, None)
    assert (rng.start, rng.end) == (2.0, 3.0)
