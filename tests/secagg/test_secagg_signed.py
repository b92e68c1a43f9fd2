"""Negative weights under SecAgg+: VRed's and Semi-VRed's λ above the round's β_max.

Above β_max = 1/(2A) the clear rules weigh some clients negatively (Malekmohammadi & Yu,
2024, eq. 12: ``p_k (1 + 2β (a_k - A))``), and the weights still sum to 1. Each client
masks its ratio ``round(Q a_k / a_max)`` with its sign; the modular sum of n ratios in
[-Q, Q] is told apart from a wrapped negative one while 2nQ < 2^32, and the bound on the
aggregate grows with ``Σ |ratio| / Σ ratio`` (fairfl.secagg.protocol.quantisation_bound).
The numbers of the unit tests are worked by hand; the runs compare the secure model with
the clear one of the same clients, within the bound the round records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fairfl.secagg.config import MODULUS_RANGE, SecAggSettings
from fairfl.secagg.forms import weight_magnitude
from fairfl.secagg.protocol import quantisation_bound, signed_weight_total, weight_ratio
from fairfl.simulation import run_inprocess

C = 8.0  # secagg-clipping-range's default
Q = 4194304  # secagg-quantization-range's default
#: 5 clients, one round; β = 100 puts both rules above β_max (30 and 66 on these clients).
BASE = {"num-partitions": 5, "num-server-rounds": 1, "local-epochs": 1, "seed": 3}


def test_a_ratio_keeps_its_sign_and_is_held_to_one():
    assert weight_ratio(-500.0, 1000.0, 10) == -5
    assert weight_ratio(250.0, 1000.0, 10) == 2  # 2.5 to the even integer
    assert weight_ratio(-2000.0, 1000.0, 10) == -10
    assert weight_ratio(2000.0, 1000.0, 10) == 10


def test_a_wrapped_negative_sum_is_read_as_negative():
    # 3 clients, Q = 10: sums lie in [-30, 30]; 2^32 - 5 is -5 wrapped around.
    assert signed_weight_total(25, 3, 10) == 25
    assert signed_weight_total(30, 3, 10) == 30
    assert signed_weight_total(MODULUS_RANGE - 5, 3, 10) == -5


def test_a_sum_holds_half_the_clients_it_held_so_that_signs_are_told_apart():
    settings = SecAggSettings()
    assert settings.max_clients == 511  # (2^32 - 1) // (2 * 2^22)
    assert 2 * settings.max_clients * Q < MODULUS_RANGE


def test_the_bound_grows_with_the_weights_magnitudes():
    # n = 4, C = 1, U = 1, W = 100: n (2C + U) / W = 0.12 for weights >= 0 (|W| = W);
    # |W| = 300: n (2C + U (1 + 3) / 2) / W = 4 * 4 / 100 = 0.16.
    assert quantisation_bound(4, 1.0, 100) == pytest.approx(0.12)
    assert quantisation_bound(4, 1.0, 100, abs_total=100) == pytest.approx(0.12)
    assert quantisation_bound(4, 1.0, 100, abs_total=300) == pytest.approx(0.16)


def test_only_parts_that_may_be_negative_bound_their_magnitude():
    broadcast = {"weight-kind": "broadcast", "weight": -250.0}
    assert weight_magnitude(broadcast, 1000.0, 100) == 25
    semivred = {"weight-kind": "semivred", "semivred-clip-negative": False}
    # 1 - 2βA: 1 - 2 * 0.2 * 1 > 0 (below β_max = 2.5): never negative.
    assert weight_magnitude({**semivred, "semivred-beta": 0.2, "excess": 1.0}, 1.0, 100) is None
    above = {**semivred, "semivred-beta": 5.0, "excess": 1.0}
    assert weight_magnitude(above, 1.0, 100) == 100
    clipped = {**above, "semivred-clip-negative": True}
    assert weight_magnitude(clipped, 1.0, 100) is None
    assert weight_magnitude({"weight-kind": "term"}, 1.0, 100) is None


def _gap(a, b) -> float:
    return max(
        float(np.abs(x.numpy() - y.numpy()).max())
        for x, y in zip(a.values(), b.values(), strict=True)
    )


def _slack(arrays) -> float:
    return max(float(np.spacing(np.abs(a.numpy()).max())) for a in arrays.values())


@pytest.mark.parametrize(
    ("rule", "beta_key"), [("vred", "vred-beta"), ("semivred", "semivred-beta")]
)
def test_negative_weights_give_the_clear_model_within_the_recorded_bound(
    tmp_path: Path, rule: str, beta_key: str
):
    config = {**BASE, "strategy": rule, beta_key: 100.0}
    clear = run_inprocess({**config, "out-dir": str(tmp_path / "clear")})
    weights = clear.strategy.train_records[1].weights
    assert min(weights.values()) < 0 < max(weights.values())  # the case under test
    secure = run_inprocess(
        {**config, "out-dir": str(tmp_path / "secure"), "secure-aggregation": "secagg+"}
    )
    record = secure.strategy.train_records[1]
    assert record.accepted == clear.strategy.train_records[1].accepted  # nobody dropped
    diagnostics = record.diagnostics
    n, total = diagnostics["secagg-clients"], diagnostics["secagg-weight-total"]
    assert n == 5 and 0 < total < n * Q
    if rule == "vred":
        # The server's own λ_k: Σ |round(Q λ_k / max |λ|)|, exactly; the step scale Σ λ = 1.
        top = max(abs(w) for w in weights.values())
        magnitude = sum(abs(round(Q * w / top)) for w in weights.values())
        expected = n * (2 * C + C * (1 + magnitude / total) / 2) / total
        assert diagnostics["secagg-bound"] == pytest.approx(expected)
    else:
        # Each |ratio| bounded by Q; the statistics f̄ and A add their own share.
        expected = n * (2 * C + C * (1 + n * Q / total) / 2) / total
        assert diagnostics["secagg-bound"] >= expected
    gap = _gap(clear.arrays, secure.arrays)
    assert 0 < gap <= diagnostics["secagg-bound"] + _slack(clear.arrays)
