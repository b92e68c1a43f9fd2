"""Rules against the baseline over seeds: paired differences, 95 % intervals, t-tests (issue 50)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairfl.report.paired import MIN_SEEDS, paired_difference
from fairfl.report.tables import TABLE6_COLUMNS, Stat


def test_three_seeds_worked_by_hand():
    # Differences 1, 2, 3: mean 2, s_d = 1, s_d / √3 = 0.57735; t_{0.975, 2} = 4.302653
    # (Student's table), so 2 ± 2.484138. t = 2 / 0.57735 = 3.4641 and, with 2 degrees
    # of freedom, P(T <= t) = 1/2 + t / (2 √(2 + t²)) = 0.962910: p = 0.074180.
    d = paired_difference([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert d.count == 3
    assert d.mean == pytest.approx(2.0)
    assert (d.low, d.high) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)
    assert d.p_value == pytest.approx(0.074180, abs=1e-6)


def test_the_same_difference_on_every_seed_has_no_spread():
    d = paired_difference([0.5, 0.25, 0.75], [0.75, 0.5, 1.0])  # 0.25 each, exactly
    assert (d.low, d.high) == (0.25, 0.25) and d.p_value == 0.0
    same = paired_difference([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert (same.mean, same.p_value) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("base", "other", "match"),
    [
        ([0.1, 0.2], [0.2, 0.3], f">= {MIN_SEEDS} seeds"),
        ([0.1, 0.2, 0.3], [0.2, 0.3], "one length"),
        ([0.1, math.nan, 0.3], [0.2, 0.3, 0.4], "finite"),
    ],
)
def test_bad_pairs_are_refused(base, other, match):
    with pytest.raises(ValueError, match=match):
        paired_difference(base, other)


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=MIN_SEEDS, max_size=12))
def test_the_interval_holds_the_mean_and_the_p_value_is_a_probability(pairs):
    base, other = zip(*pairs, strict=True)
    d = paired_difference(base, other)
    assert d.low <= d.mean + 1e-12 and d.mean <= d.high + 1e-12
    assert d.high - d.mean == pytest.approx(d.mean - d.low, abs=1e-9)  # symmetric
    assert 0.0 <= d.p_value <= 1.0
    assert d.mean == pytest.approx(float(np.mean(np.subtract(other, base))), abs=1e-12)


def test_table6_shows_jains_index_unitless_with_three_digits():
    jain = next(c for c in TABLE6_COLUMNS if c.metric == "jain-index")
    assert jain.header == "Jain"
    assert jain.cell(Stat(0.93456, 0.0123, 3)) == "0.935 ± 0.012"
