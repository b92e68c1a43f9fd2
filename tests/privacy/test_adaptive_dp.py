"""dp = "central-adaptive": Andrew et al.'s quantile-tracking C under fair weights."""

import math

import pytest

from fairfl.privacy.accounting import epsilon_of
from fairfl.privacy.adaptive import geometric_update, noised_unclipped_fraction
from fairfl.privacy.config import PrivacySettings
from fairfl.settings import RunSettings
from fairfl.strategies import TERM
from fairfl.strategies.private import attach_privacy
from tests.privacy.test_central_dp import LN3, three_replies
from tests.strategies.baseline_helpers import aggregate_round


def test_count_and_update_by_hand():
    # 3 of 4 unclipped, no noise: (3 - 2) / 4 + 1/2 = 0.75; m = 5 asked: (3 - 2) / 5 + 0.5.
    assert noised_unclipped_fraction(3, 4, 4, 0.0) == pytest.approx(0.75)
    assert noised_unclipped_fraction(3, 4, 5, 0.5) == pytest.approx(0.8)
    # γ = 0.5, η = 0.2: too few clipped -> C shrinks by e^{-0.05}; too many -> grows.
    assert geometric_update(1.0, 0.75, 0.5, 0.2) == pytest.approx(math.exp(-0.05))
    assert geometric_update(2.0, 0.0, 0.5, 0.2) == pytest.approx(2 * math.exp(0.1))


def test_term_round_noise_count_and_next_norm():
    strategy = TERM(alpha=LN3)
    settings = PrivacySettings(
        dp="central-adaptive",
        dp_clipping_norm=6.0,
        dp_noise_multiplier=0.5,
        dp_clipped_count_stddev=1.0,
    )
    attach_privacy(strategy, settings, sampling_rate=1.0, seed=7)
    _, metrics = aggregate_round(strategy, three_replies())
    diagnostics = strategy.train_records[1].diagnostics
    # z_Δ = (0.5^-2 - (2·1)^-2)^(-1/2) = 3.75^(-1/2); σ = z_Δ C λ_max = z_Δ · 6 · 9/13.
    z_delta = 3.75**-0.5
    assert diagnostics["dp-noise-multiplier-model"] == pytest.approx(z_delta)
    assert diagnostics["dp-noise-std"] == pytest.approx(z_delta * 6 * 9 / 13)
    assert diagnostics["dp-count-noise-std"] == 1.0
    assert diagnostics["dp-clipping-norm"] == 6.0
    # ‖Δ‖ = (3, 6, 9) against C = 6: 2 unclipped of 3 replies, m = 5 asked.
    fraction = diagnostics["dp-unclipped-fraction-noised"]
    draw = (fraction - 0.5) * 5 - (2 - 1.5)
    assert abs(draw) < 6  # a N(0, 1) draw
    # The pair (model z_Δ, count 2σ_b = 2) is one Gaussian of z = 0.5.
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, 0.5)], 1e-5))
    assert strategy.privacy.clipping_norm == pytest.approx(6.0 * math.exp(-0.2 * (fraction - 0.5)))
    state = strategy.privacy.state()
    assert state["clipping_norm"] == strategy.privacy.clipping_norm
    again = TERM(alpha=LN3)
    attach_privacy(again, settings, sampling_rate=1.0, seed=7)
    again.privacy.load_state(state)
    assert again.privacy.clipping_norm == strategy.privacy.clipping_norm


def test_default_count_noise_too_small_is_refused_naming_the_key():
    strategy = TERM(alpha=LN3)
    attach_privacy(strategy, PrivacySettings(dp="central-adaptive"), sampling_rate=1.0, seed=0)
    # z = 1 with m = 5: m/20 = 0.25 <= z/2.
    with pytest.raises(ValueError, match="run config dp-clipped-count-stddev must exceed"):
        aggregate_round(strategy, three_replies())


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("dp-target-quantile", 1.5, r"run config dp-target-quantile must be in \[0, 1\], got 1.5"),
        ("dp-clip-lr", 0.0, "run config dp-clip-lr must be > 0, got 0.0"),
        (
            "dp-clipped-count-stddev",
            0.4,
            r"run config dp-clipped-count-stddev must be > dp-noise-multiplier / 2 \(0.5\)",
        ),
    ],
)
def test_adaptive_ranges_are_checked_at_start(key, value, message):
    with pytest.raises(ValueError, match=message):
        RunSettings.from_run_config({"dp": "central-adaptive", key: value})


@pytest.mark.integration
def test_resumed_adaptive_run_ends_with_the_same_model_norm_and_epsilon(tmp_path):
    import numpy as np

    from tests.privacy.test_central_dp import whole_and_resumed

    config = {
        "num-partitions": 4,
        "num-server-rounds": 4,
        "strategy": "term",
        "dp": "central-adaptive",
        "dp-noise-multiplier": 0.5,
        "dp-clipped-count-stddev": 1.0,
    }
    whole, resumed = whole_and_resumed(tmp_path, config)
    for key, array in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key].numpy(), array.numpy())
    for name in ("epsilon", "final_clipping_norm", "released_rounds"):
        assert resumed.summary["privacy"][name] == whole.summary["privacy"][name]
    assert whole.summary["privacy"]["final_clipping_norm"] != 1.0  # C moved
