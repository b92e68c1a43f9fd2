"""Each rule's form under secure aggregation, and the weight and payload a client masks."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from flwr.server.workflow import SecAggPlusWorkflow

from fairfl.secagg.client import _with_integers
from fairfl.secagg.config import MODULUS_RANGE, SecAggSettings
from fairfl.secagg.forms import SecureForm, client_part, held_after
from fairfl.strategies.registry import STRATEGIES
from fairfl.strategies.secure import secure_form_of

UPDATE = [np.array([0.1, -0.2])]  # Δ_k = w̄_k - w^t


def test_num_examples_weight_is_the_scaled_count():
    part = {"weight-kind": "num-examples", "weight-scale": 0.5, "num-examples": 10}
    weight, payload = client_part(part, UPDATE)
    assert weight == 5.0  # σ n_k = 0.5 · 10
    np.testing.assert_array_equal(payload[0], UPDATE[0])


def test_qffl_weight_is_h_and_payload_minus_delta_over_h():
    # q = 1, L = 10, F = 0.5: Δw = L (w^t - w̄) = (-1, 2), ‖Δw‖² = 5,
    # h = q F^{q-1} ‖Δw‖² + L F^q = 5 + 5 = 10, Δ^q = F^q Δw = (-0.5, 1),
    # u = -Δ^q / h = (0.05, -0.1).
    part = {
        "weight-kind": "qffl",
        "qffl-q": 1.0,
        "qffl-lipschitz": 10.0,
        "qffl-by-size": False,
        "num-examples": 7,
        "loss": 0.5,
    }
    weight, payload = client_part(part, UPDATE)
    assert weight == pytest.approx(10.0)
    np.testing.assert_allclose(payload[0], [0.05, -0.1])
    # The "p" weighting: the weight is n_k h_k = 70, the payload the same.
    weight, _ = client_part({**part, "qffl-by-size": True}, UPDATE)
    assert weight == pytest.approx(70.0)


def test_qfedsgd_weight_is_h_of_the_gradient_and_payload_minus_delta_over_h():
    # The update is the gradient g = (0.1, -0.2). q = 1, L = 10, F = 0.5: ‖g‖² = 0.05,
    # h = q F^{q-1} ‖g‖² + L F^q = 0.05 + 5 = 5.05, Δ = F^q g = (0.05, -0.1),
    # u = -Δ / h = (-0.05, 0.1) / 5.05.
    part = {
        "weight-kind": "qfedsgd",
        "qffl-q": 1.0,
        "qffl-lipschitz": 10.0,
        "qffl-by-size": False,
        "num-examples": 7,
        "loss": 0.5,
    }
    weight, payload = client_part(part, UPDATE)
    assert weight == pytest.approx(5.05)
    np.testing.assert_allclose(payload[0], [-0.05 / 5.05, 0.1 / 5.05])
    # The "p" weighting: n_k h_k = 35.35; summed, Σ n_k Δ_k / Σ n_k h_k as Algorithm 1.
    weight, _ = client_part({**part, "qffl-by-size": True}, UPDATE)
    assert weight == pytest.approx(35.35)


def test_term_weight_is_tilted_by_the_public_shift():
    # σ n_k e^{α (F_k - c)} = 2 · 10 · e^{0.5 (2 - 3)} = 20 e^{-0.5} = 12.1306
    part = {
        "weight-kind": "term",
        "weight-scale": 2.0,
        "term-alpha": 0.5,
        "term-shift": 3.0,
        "num-examples": 10,
        "loss": 2.0,
    }
    weight, payload = client_part(part, UPDATE)
    assert weight == pytest.approx(20 * math.exp(-0.5))
    np.testing.assert_array_equal(payload[0], UPDATE[0])


def test_broadcast_weight_is_the_servers():
    weight, _ = client_part({"weight-kind": "broadcast", "weight": 7.5}, UPDATE)
    assert weight == 7.5


SEMI = {"private-key": "loss-before-training", "private-bound": 8.0}
PRIVATE = {"loss-before-training": 2.0}  # F_k, kept on the client


def test_semivred_sums_of_scalars_mask_the_private_loss_times_the_share():
    # First sum: σ n_k F_k = 0.5 · 2 = 1; second, with f̄ = 1.5: 0.5 · (2 - 1.5)_+ = 0.25.
    first = {**SEMI, "weight-kind": "semivred-mean", "weight": 1000.0, "share": 0.5}
    weight, payload = client_part(first, UPDATE, PRIVATE)
    assert weight == 1000.0  # a_max: every r̂_k = Q, the sum is Σ σ n_k F_k
    assert payload[0].tolist() == [1.0]
    second = {**first, "weight-kind": "semivred-excess", "mean-loss": 1.5}
    assert client_part(second, UPDATE, PRIVATE)[1][0].tolist() == [0.25]
    below = {**second, "mean-loss": 3.0}  # (2 - 3)_+ = 0
    assert client_part(below, UPDATE, PRIVATE)[1][0].tolist() == [0.0]


def test_semivred_weight_is_computed_by_the_client_from_f_bar_and_a():
    # σ' n_k (1 + 2β ((F_k - f̄)_+ - A)) = 2 · 3 · (1 + 2 · 0.5 · (0.5 - 0.1)) = 6 · 1.4 = 8.4.
    part = {
        **SEMI,
        "weight-kind": "semivred",
        "weight-scale": 2.0,
        "num-examples": 3,
        "mean-loss": 1.5,
        "excess": 0.1,
        "semivred-beta": 0.5,
        "semivred-clip-negative": False,
    }
    weight, payload = client_part(part, UPDATE, PRIVATE)
    assert weight == pytest.approx(8.4)
    np.testing.assert_array_equal(payload[0], UPDATE[0])
    # A = 2: 1 + 2 · 0.5 · (0.5 - 2) = -0.5 < 0: 6 · -0.5 = -3, masked with its sign (as
    # the clear rule weighs it), unless clipped to 0.
    assert client_part({**part, "excess": 2.0}, UPDATE, PRIVATE)[0] == pytest.approx(-3.0)
    clipped = {**part, "excess": 2.0, "semivred-clip-negative": True}
    assert client_part(clipped, UPDATE, PRIVATE)[0] == 0.0


def test_a_semivred_part_refuses_a_missing_or_unbounded_loss():
    part = {**SEMI, "weight-kind": "semivred-mean", "weight": 1000.0, "share": 1.0}
    with pytest.raises(ValueError, match="did not carry"):
        client_part(part, UPDATE, {})
    with pytest.raises(ValueError, match="secagg-clipping-range"):
        client_part(part, UPDATE, {"loss-before-training": 9.0})


FEDFA = {"private-key": "acc-after-training", "private-bound": 1.0, "count": 4}
I_MAX = -math.log2(1e-6)


def test_fedfa_sums_of_scalars_mask_the_accuracy_then_its_information():
    kept = {"acc-after-training": 0.5}
    first = {**FEDFA, "weight-kind": "fedfa-accuracy", "weight": 1000.0, "share": 1.0}
    assert client_part(first, UPDATE, kept)[1][0].tolist() == [0.5]
    # Σ Acc = 2: a_k = 0.25, I_k = -log2(0.25 + 1e-6) = 2 - log2(1 + 4e-6), masked over I_max.
    second = {
        **first,
        "weight-kind": "fedfa-information",
        "share": 1 / I_MAX,
        "accuracy-total": 2.0,
    }
    (information,) = client_part(second, UPDATE, kept)[1][0].tolist()
    assert information * I_MAX == pytest.approx(2.0 - math.log2(1 + 4e-6), rel=1e-12)
    # Σ Acc = 0 (every accuracy 0): equal shares 1/m = 1/4, I_k = 2 again.
    zero = {**second, "accuracy-total": 0.0}
    assert client_part(zero, UPDATE, {"acc-after-training": 0.0})[1][0][0] * I_MAX == (
        pytest.approx(2.0, abs=1e-5)
    )


def test_fedfa_weight_is_computed_by_the_client_from_the_two_sums():
    # I_k ≈ 2 (as above), Σ I = 8: (1 - β) I_k / Σ I + β (the server's share 0.3)
    # = 0.5 · 0.25 + 0.5 · 0.3 = 0.275, times the scale 10.
    part = {
        **FEDFA,
        "weight-kind": "fedfa",
        "weight-scale": 10.0,
        "accuracy-total": 2.0,
        "information-total": 8.0,
        "fedfa-beta": 0.5,
        "frequency-share": 0.3,
    }
    weight, payload = client_part(part, UPDATE, {"acc-after-training": 0.5})
    assert weight == pytest.approx(2.75, rel=1e-5)
    np.testing.assert_array_equal(payload[0], UPDATE[0])


# FairFed: the three clients of tests/strategies/test_fairfed.py, whose sums are worked
# there by hand. Client 1 counts (3, 1, 1, 1 | 1, 1, 0, 2), n = (10, 8, 4); the summed
# counts are (5, 1, 1, 3 | 3, 2, 1, 6): SPD_g = 4/10 - 8/12 = -4/15, SPD_1 = -5/12, so
# Δ_1 = 3/20; client 3 holds A = 1 only: Δ_3 = |Acc_g - Acc_3| = |17/22 - 1| = 5/22.
FAIRFED_COUNTS = [3, 1, 1, 1, 1, 1, 0, 2]
FAIRFED_TOTAL = [5, 1, 1, 3, 3, 2, 1, 6]
FAIRFED_PRIVATE = {"group-counts": FAIRFED_COUNTS}
FAIRFED_COMMON = {
    "private-key": "group-counts",
    "private-bound": 100,
    "fairfed-previous": 10 / 22,  # ω_1^0 = n_1 / n
}


def test_fairfed_first_sum_masks_the_counts_exactly_and_the_scaled_previous_weight():
    part = {**FAIRFED_COMMON, "weight-kind": "fairfed-counts", "weight": 1000.0, "share": 0.25}
    weight, payload = client_part(part, UPDATE, FAIRFED_PRIVATE)
    assert weight == 1000.0  # a_max
    assert payload[0].dtype == np.int64 and payload[0].tolist() == FAIRFED_COUNTS
    assert payload[1].tolist() == [0.25 * 10 / 22]  # s ω^0, s = 1 / (2 (1 + β)), β = 1
    # A client holding ω_k masks it, not ω^0.
    _, held = client_part(part, UPDATE, {**FAIRFED_PRIVATE, "fairfed-weight": 0.3})
    assert held[1].tolist() == [0.25 * 0.3]


def test_fairfed_second_sum_masks_the_half_gap_from_the_summed_counts():
    part = {
        **FAIRFED_COMMON,
        "weight-kind": "fairfed-gaps",
        "weight": 1000.0,
        "share": 0.5,
        "fairfed-total-counts": FAIRFED_TOTAL,
        "fairfed-metric": "spd",
    }
    _, payload = client_part(part, UPDATE, FAIRFED_PRIVATE)
    assert payload[0][0] == pytest.approx(0.5 * 3 / 20, abs=1e-15)
    only_a1 = {"group-counts": [0, 0, 0, 0, 2, 0, 0, 2]}  # client 3: SPD_3 undefined
    _, payload = client_part(part, UPDATE, only_a1)
    assert payload[0][0] == pytest.approx(0.5 * 5 / 22, abs=1e-15)


def test_fairfed_weight_is_computed_and_kept_by_the_client():
    # Round 1: Σ ω^0 = 1, mean Δ = 13/99 (test_fairfed.py), β = 1 (FF6):
    # ω̄_1 = 10/22 - (3/20 - 13/99) = 900/1980 - 37/1980 = 863/1980.
    part = {
        **FAIRFED_COMMON,
        "weight-kind": "fairfed",
        "weight-scale": 250.0,  # a_max / (2 (1 + β))
        "fairfed-total-counts": FAIRFED_TOTAL,
        "fairfed-metric": "spd",
        "fairfed-weight-total": 1.0,
        "fairfed-mean-gap": 13 / 99,
        "fairfed-beta": 1.0,
    }
    weight, payload = client_part(part, UPDATE, FAIRFED_PRIVATE)
    assert weight == pytest.approx(250 * 863 / 1980, rel=1e-14)
    np.testing.assert_array_equal(payload[0], UPDATE[0])
    assert held_after(part, FAIRFED_PRIVATE) == {"fairfed-weight": pytest.approx(863 / 1980)}
    # A held ω_1 = 0.3 among Σ ω^{t-1} = 0.6: ω_1^{t-1} / Σ = 1/2, ω̄_1 = 1/2 - 37/1980.
    held = {**FAIRFED_PRIVATE, "fairfed-weight": 0.3}
    moved = {**part, "fairfed-weight-total": 0.6}
    assert held_after(moved, held)["fairfed-weight"] == pytest.approx(0.5 - 37 / 1980)
    # A gap far above the mean clips ω̄ at 0, as the clear rule does.
    assert held_after({**part, "fairfed-mean-gap": 0.0, "fairfed-beta": 4.0}, held) == {
        "fairfed-weight": 0.0
    }
    assert held_after({"weight-kind": "semivred"}, held) == {}  # only FairFed keeps a weight


def test_a_fairfed_part_refuses_unusable_counts_or_weights():
    part = {**FAIRFED_COMMON, "weight-kind": "fairfed-counts", "weight": 1000.0, "share": 0.25}
    with pytest.raises(ValueError, match="8 ints"):
        client_part(part, UPDATE, {"group-counts": [1, 2, 3, 4]})
    with pytest.raises(ValueError, match="8 ints"):
        client_part(part, UPDATE, {})
    with pytest.raises(ValueError, match="count from 1 to max-num-examples=100 samples, got 0"):
        client_part(part, UPDATE, {"group-counts": [0] * 8})
    with pytest.raises(ValueError, match="got 101"):
        client_part(part, UPDATE, {"group-counts": [101, 0, 0, 0, 0, 0, 0, 0]})
    weighted = {**part, "weight-kind": "fairfed", "weight-scale": 1.0, "fairfed-weight-total": 0.0}
    with pytest.raises(ValueError, match="not > 0"):
        client_part(weighted, UPDATE, FAIRFED_PRIVATE)


def test_integer_arrays_are_masked_as_they_are_only_with_the_weight_a_max():
    q = 16
    floats = [np.array([7, 9])]  # the quantised float arrays, in order
    payload = [np.array([0.1, 0.2]), np.array([3, 0, 16], dtype=np.int64)]
    out = _with_integers(payload, floats, q, q)
    assert [a.tolist() for a in out] == [[7, 9], [3, 0, 16]]
    with pytest.raises(ValueError, match="weight a_max"):
        _with_integers(payload, floats, q - 1, q)  # r̂_k < 1 would scale the counts
    with pytest.raises(ValueError, match=r"\[0, 16\]"):
        _with_integers([np.array([17], dtype=np.int64)], [], q, q)


def test_a_bad_part_is_refused():
    with pytest.raises(ValueError, match="unknown client weight 'bogus'"):
        client_part({"weight-kind": "bogus"}, UPDATE)
    term = {"weight-kind": "term", "weight-scale": 1.0, "term-alpha": 1.0, "term-shift": 0.0}
    with pytest.raises(ValueError, match="needs F_k"):
        client_part({**term, "num-examples": 1}, UPDATE)
    # A weight not finite, or negative where the form's weights never are (n_k, σ n_k).
    with pytest.raises(ValueError, match=r"broadcast weight is nan"):
        client_part({"weight-kind": "broadcast", "weight": float("nan")}, UPDATE)
    negative = {"weight-kind": "num-examples", "weight-scale": -1.0, "num-examples": 2}
    with pytest.raises(ValueError, match=r"num-examples weight is -2\.0"):
        client_part(negative, UPDATE)


@pytest.mark.parametrize(
    ("rule", "kind", "weight"),
    [
        ("fedavg", "one-round", "num-examples"),
        ("qffl", "one-round", "qffl"),
        ("qfedsgd", "one-round", "qfedsgd"),
        ("fedadam", "one-round", "num-examples"),
        ("fedyogi", "one-round", "num-examples"),
        ("rcfl", "one-round", "broadcast"),
        ("fedfa", "two-rounds", "fedfa"),
        ("term", "one-round", "term"),
        ("afl", "scalars-in-clear", "broadcast"),
        ("deltafl", "scalars-in-clear", "broadcast"),
        ("gifair", "scalars-in-clear", "broadcast"),
        ("fairfed", "two-rounds", "fairfed"),
        ("semivred", "two-rounds", "semivred"),
        ("vred", "scalars-in-clear", "broadcast"),
        ("fedmgda", "impossible", None),
        ("fedfv", "impossible", None),
        ("equitable", "impossible", None),
    ],
)
def test_each_rule_declares_its_form(rule, kind, weight):
    form = secure_form_of(STRATEGIES[rule].strategy)
    assert form is not None and (form.kind, form.weight) == (kind, weight)
    assert form.reason


def test_a_form_names_its_weight_only_when_supported():
    with pytest.raises(ValueError, match="needs a weight"):
        SecureForm("one-round", "r")
    with pytest.raises(ValueError, match="takes no weight"):
        SecureForm("impossible", "r", "broadcast")


def test_the_defaults_are_flowers():
    defaults = inspect.signature(SecAggPlusWorkflow.__init__).parameters
    settings = SecAggSettings()
    assert settings.secure_aggregation == "none"
    assert settings.secagg_max_weight == defaults["max_weight"].default
    assert settings.secagg_clipping_range == defaults["clipping_range"].default
    assert settings.secagg_quantization_range == defaults["quantization_range"].default
    assert defaults["modulus_range"].default == MODULUS_RANGE


@pytest.mark.parametrize(
    ("shares", "threshold", "sampled", "expected"),
    [
        (3, 2, 10, (3, 2)),  # integers: as given
        (4, 2, 10, (5, 2)),  # an even count below the sample: one more (odd ring)
        (10, 2, 5, (5, 2)),  # more shares than clients: all of them
        (0.5, 0.6, 10, (5, 3)),  # fractions: round(0.5·10) = 5, round(0.6·5) = 3
        (1.0, 1.0, 4, (4, 4)),  # all clients, every share
        (0.1, 0.5, 10, (10, 5)),  # round(0.1·10) = 1 is odd; at most 2: all ten
    ],
)
def test_shares_and_threshold_of_a_round(shares, threshold, sampled, expected):
    settings = SecAggSettings(secagg_num_shares=shares, secagg_reconstruction_threshold=threshold)
    assert settings.shares_and_threshold(sampled) == expected


def test_a_subclass_that_overrides_the_aggregate_loses_an_inherited_form():
    from fairfl.strategies.fedavg import FedAvg

    class Reaggregated(FedAvg):
        def aggregate(self, server_round, global_arrays, replies):
            return super().aggregate(server_round, global_arrays, replies)

    class Renamed(FedAvg):
        rule_name = "renamed"

    assert secure_form_of(Reaggregated) is None
    assert secure_form_of(Renamed) == FedAvg.secure_form
