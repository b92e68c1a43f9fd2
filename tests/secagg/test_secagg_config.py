"""SecAggSettings, declared with the settings kit (fairfl.fields): each bound once.

A bad value is refused with a ParameterError whose ``key`` is the run-config key and
whose message starts ``run config <key>``; the defaults and accepted values are those
the how-to's table states (docs/site/howto/aggregate-securely.md): Flower's
SecAggPlusWorkflow's, and 3 shares with threshold 2 from Flower's example.
"""

from __future__ import annotations

import pytest

from fairfl.fields import ParameterError
from fairfl.secagg.config import SecAggSettings


@pytest.mark.parametrize(
    ("keywords", "key"),
    [
        ({"secure_aggregation": "secagg"}, "secure-aggregation"),
        ({"secagg_num_shares": 0}, "secagg-num-shares"),
        ({"secagg_num_shares": 2}, "secagg-num-shares"),  # neither a fraction nor >= 3
        ({"secagg_num_shares": 3.5}, "secagg-num-shares"),
        ({"secagg_reconstruction_threshold": -1.0}, "secagg-reconstruction-threshold"),
        ({"secagg_reconstruction_threshold": 2.5}, "secagg-reconstruction-threshold"),
        ({"secagg_reconstruction_threshold": 3}, "secagg-reconstruction-threshold"),  # t >= k
        ({"secagg_clipping_range": 0.0}, "secagg-clipping-range"),
        ({"secagg_clipping_range": 2e12}, "secagg-clipping-range"),
        ({"secagg_quantization_range": 1}, "secagg-quantization-range"),
        ({"secagg_quantization_range": 2**32}, "secagg-quantization-range"),
        ({"secagg_max_weight": float("nan")}, "secagg-max-weight"),
    ],
)
def test_a_bad_setting_names_its_key(keywords, key):
    with pytest.raises(ParameterError) as refused:
        SecAggSettings(**keywords)
    assert refused.value.key == key
    assert str(refused.value).startswith(f"run config {key} ")


def test_the_settings_keep_their_defaults_and_accepted_values():
    assert SecAggSettings.defaults() == {
        "secure-aggregation": "none",
        "secagg-num-shares": 3.0,
        "secagg-reconstruction-threshold": 2.0,
        "secagg-clipping-range": 8.0,
        "secagg-quantization-range": 2**22,
        "secagg-max-weight": 1000.0,
    }
    # The ends of each range: a fraction of the clients or of the shares, k = 3 with
    # t = 2, C = 1e12, Q in [2, 2^32).
    for keywords in (
        {"secagg_num_shares": 1.0, "secagg_reconstruction_threshold": 1.0},
        {"secagg_num_shares": 0.01, "secagg_reconstruction_threshold": 0.01},
        {"secagg_num_shares": 3, "secagg_reconstruction_threshold": 2},
        {"secagg_clipping_range": 1e12, "secagg_quantization_range": 2},
        {"secagg_quantization_range": 2**32 - 1, "secure_aggregation": "secagg+"},
    ):
        SecAggSettings(**keywords)
