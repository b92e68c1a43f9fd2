"""FederatedScope's fairness summary plus Gini (fairfl.metrics), against numbers worked by hand."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairfl.metrics import (
    cosine_to_uniform,
    decile_values,
    distribution_entropy,
    fairness_metrics,
    gini_coefficient,
    in_percent,
)

ACC = [0.2, 0.4, 0.6, 0.8]


def test_deciles_are_federatedscopes_order_statistics():
    # n = 4: bottom x_(4 // 10) = x_(0) = 0.2, top x_(36 // 10) = x_(3) = 0.8.
    assert decile_values([0.8, 0.2, 0.6, 0.4]) == (0.2, 0.8)
    # n = 20, values 0, 1, ..., 19: bottom x_(2) = 2, top x_(18) = 18.
    assert decile_values(list(range(20))[::-1]) == (2.0, 18.0)


def test_entropy_by_hand():
    # p = (0.2, 0.4, 0.6, 0.8) / 2 = (0.1, 0.2, 0.3, 0.4);
    # -Σ p ln p = 0.1*2.302585 + 0.2*1.609438 + 0.3*1.203973 + 0.4*0.916291 = 1.279854.
    assert distribution_entropy(ACC) == pytest.approx(1.279854, abs=1e-6)
    assert distribution_entropy([0.5] * 4) == pytest.approx(math.log(4))
    assert distribution_entropy([0.0, 0.0, 0.9]) == 0.0  # one client has everything
    assert distribution_entropy([0.0, 0.0]) == pytest.approx(math.log(2))  # all equal
    with pytest.raises(ValueError, match=r"entropy needs values >= 0, got -0\.1"):
        distribution_entropy([0.5, -0.1])


def test_cosine_to_uniform_by_hand():
    # mean = 0.5; mean of squares = (0.04 + 0.16 + 0.36 + 0.64) / 4 = 0.3;
    # 0.5 / sqrt(0.3) = 0.912871.
    assert cosine_to_uniform(ACC) == pytest.approx(0.912871, abs=1e-6)
    assert cosine_to_uniform([0.0, 0.0, 0.0, 0.7]) == pytest.approx(0.5)  # 1/sqrt(4)
    assert cosine_to_uniform([0.0, 0.0]) == 1.0


def test_gini_by_hand():
    # Σ_i Σ_j |x_i - x_j| over ordered pairs = 2 * (0.2+0.4+0.6 + 0.2+0.4 + 0.2) = 4.0;
    # G = 4.0 / (2 * 16 * 0.5) = 0.25.
    assert gini_coefficient(ACC) == pytest.approx(0.25)
    assert gini_coefficient([0.0, 0.0, 0.0, 0.9]) == pytest.approx(0.75)  # 1 - 1/4
    assert gini_coefficient([0.3, 0.3, 0.3]) == 0.0
    assert gini_coefficient([0.0, 0.0]) == 0.0
    with pytest.raises(ValueError, match=r"Gini coefficient needs values >= 0, got -1\.0"):
        gini_coefficient([1.0, -1.0])


def test_fairness_metrics_carry_the_new_names_as_fractions():
    m = fairness_metrics(ACC, [10, 10, 10, 10], [1.0, 1.0, 1.0, 1.0])
    assert m["acc-best"] == 0.8 and m["acc-worst"] == 0.2
    assert (m["acc-bottom-decile"], m["acc-top-decile"]) == (0.2, 0.8)
    assert m["entropy"] == pytest.approx(1.279854, abs=1e-6)
    assert m["cosine-uniform"] == pytest.approx(0.912871, abs=1e-6)
    assert m["gini-index"] == pytest.approx(0.25)
    shown = in_percent(m)
    # accuracy statistics in percent for people; the unitless indices stay as they are
    assert shown["acc-best"] == pytest.approx(80.0)
    assert shown["gini-index"] == m["gini-index"] and shown["entropy"] == m["entropy"]


fractions = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=40)


@given(fractions)
def test_bounds_and_cos_is_sqrt_jain(values):
    n = len(values)
    assert -1e-12 <= distribution_entropy(values) <= math.log(n) + 1e-9
    assert 1 / math.sqrt(n) - 1e-9 <= cosine_to_uniform(values) <= 1 + 1e-9
    assert -1e-12 <= gini_coefficient(values) <= 1 - 1 / n + 1e-9
    bottom, top = decile_values(values)
    assert min(values) <= bottom <= top <= max(values)
    m = fairness_metrics(values, [1] * n, [0.0] * n)
    assert m["cosine-uniform"] == pytest.approx(math.sqrt(m["jain-index"]), rel=1e-9)


@given(fractions, st.randoms())
def test_permutation_invariant(values, rng):
    shuffled = list(values)
    rng.shuffle(shuffled)
    for fn in (distribution_entropy, cosine_to_uniform, gini_coefficient, decile_values):
        assert fn(shuffled) == pytest.approx(fn(values), rel=1e-12, abs=1e-12)
