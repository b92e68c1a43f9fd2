"""FedAdam and FedYogi: Flower's server optimiser step on fairfl's validated average.

The numbers are worked by hand from Reddi et al. (ICLR 2021), Algorithm 2, with Flower's
bias correction for FedAdam (``√(1 − β_2^{t+1}) / (1 − β_1^{t+1})``). The round of every
test: w^t = (1, 2); client 1 (n = 1) sends (2, 2), client 2 (n = 3) sends (1, 0), so
w̄ = 0.25 (2, 2) + 0.75 (1, 0) = (1.25, 0.5) and Δ_1 = w̄ − w^t = (0.25, −1.5).
With β_1 = 0.9, β_2 = 0.99 and m_0 = v_0 = 0 (both rules):
m_1 = 0.1 Δ_1 = (0.025, −0.15), v_1 = 0.01 Δ_1² = (0.000625, 0.0225), √v_1 = (0.025, 0.15).
"""

import json
import math

import numpy as np
import pytest

from fairfl.contract import keys
from fairfl.strategies.fedopt import FedAdam, FedYogi
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, configure

START = [np.array([1.0, 2.0])]


def first_round() -> list:
    return [
        make_reply(1, [np.array([2.0, 2.0])], {keys.NUM_EXAMPLES: 1}),
        make_reply(2, [np.array([1.0, 0.0])], {keys.NUM_EXAMPLES: 3}),
    ]


def second_round() -> list:
    # Sent w^t = (0, 0); both clients at (0.01, 0.2): Δ_2 = (0.01, 0.2), Δ_2² = (1e-4, 0.04);
    # m_2 = 0.9 m_1 + 0.1 Δ_2 = (0.0235, −0.115) for both rules.
    return [
        make_reply(1, [np.array([0.01, 0.2])], {keys.NUM_EXAMPLES: 2}),
        make_reply(2, [np.array([0.01, 0.2])], {keys.NUM_EXAMPLES: 5}),
    ]


SECOND_START = [np.zeros(2)]


def test_fedadam_steps_as_the_papers_algorithm_2_by_hand():
    # Reddi et al., Algorithm 2 (and FLamby's fed_opt.py): w = w^t + η m_t / (√v_t + τ),
    # no bias correction. Flower's defaults η = 0.1, β_1 = 0.9, β_2 = 0.99, τ = 1e-3.
    strategy = FedAdam()
    new, _ = aggregate_round(strategy, first_round(), 1, START)
    # Round 1: m_1 = 0.1 Δ_1 = (0.025, -0.15), √v_1 = (0.025, 0.15):
    # w = (1 + 0.1 · 0.025/0.026, 2 − 0.1 · 0.15/0.151).
    np.testing.assert_allclose(new["0"].numpy(), [1.0961538462, 1.9006622517], rtol=1e-10)
    new, _ = aggregate_round(strategy, second_round(), 2, SECOND_START)
    # Round 2: Flower's bias-corrected step below, at η_2 = 0.0635940, scaled to η = 0.1.
    np.testing.assert_allclose(
        new["0"].numpy(), np.array([0.0577127682, -0.0482465062]) * 0.1 / 0.0635940, rtol=1e-5
    )


def test_fedadam_step_by_hand_over_two_rounds_with_flowers_bias_correction():
    strategy = FedAdam(bias_correction=True)  # Flower's FedAdam as it is
    new, metrics = aggregate_round(strategy, first_round(), 1, START)
    # Round 1: η_1 = 0.1 √(1 − 0.99²) / (1 − 0.9²) = 0.1 · 0.1410674 / 0.19 = 0.0742460;
    # w = w^t + η_1 m_1 / (√v_1 + τ) = (1 + 0.0742460 · 0.025/0.026, 2 − 0.0742460 · 0.15/0.151)
    np.testing.assert_allclose(new["0"].numpy(), [1.0713903643, 1.9262457164], rtol=1e-10)
    np.testing.assert_allclose(strategy.first_moment["0"], [0.025, -0.15], rtol=1e-12)
    np.testing.assert_allclose(strategy.second_moment["0"], [0.000625, 0.0225], rtol=1e-12)
    assert metrics["fedopt-step-norm"] == pytest.approx(math.hypot(0.0713903643, 0.0737542836))
    new, _ = aggregate_round(strategy, second_round(), 2, SECOND_START)
    # Round 2: v_2 = 0.99 v_1 + 0.01 Δ_2² = (0.00061975, 0.022675);
    # η_2 = 0.1 √(1 − 0.99³) / (1 − 0.9³) = 0.0635940; w = η_2 m_2 / (√v_2 + τ).
    np.testing.assert_allclose(strategy.second_moment["0"], [0.00061975, 0.022675], rtol=1e-12)
    np.testing.assert_allclose(new["0"].numpy(), [0.0577127682, -0.0482465062], rtol=1e-9)


def test_fedyogi_step_by_hand_over_two_rounds():
    strategy = FedYogi()  # Flower's defaults: η = 0.01, β_1 = 0.9, β_2 = 0.99, τ = 1e-3
    new, _ = aggregate_round(strategy, first_round(), 1, START)
    # Round 1: sign(v_0 − Δ_1²) = −1, so v_1 = 0.01 Δ_1² as Adam's; no bias correction:
    # w = (1 + 0.01 · 0.025/0.026, 2 − 0.01 · 0.15/0.151).
    np.testing.assert_allclose(new["0"].numpy(), [1.0096153846, 1.9900662252], rtol=1e-10)
    np.testing.assert_allclose(strategy.second_moment["0"], [0.000625, 0.0225], rtol=1e-12)
    new, _ = aggregate_round(strategy, second_round(), 2, SECOND_START)
    # Round 2: v_1 − Δ_2² = (0.000525, −0.0175), signs (+1, −1):
    # v_2 = v_1 − 0.01 Δ_2² · sign = (0.000625 − 1e-6, 0.0225 + 4e-4) = (0.000624, 0.0229)
    # (Adam's would be (0.00061975, 0.022675)); w = 0.01 m_2 / (√v_2 + τ).
    np.testing.assert_allclose(strategy.second_moment["0"], [0.000624, 0.0229], rtol=1e-12)
    np.testing.assert_allclose(strategy.first_moment["0"], [0.0235, -0.115], rtol=1e-12)
    np.testing.assert_allclose(new["0"].numpy(), [0.00904542234, -0.00754952524], rtol=1e-9)


@pytest.mark.parametrize("rule", [FedAdam, FedYogi])
def test_moments_survive_a_checkpoint_and_the_round_count_goes_on(rule):
    uninterrupted = rule()
    aggregate_round(uninterrupted, first_round(), 1, START)
    resumed = rule()
    resumed.load_state_dict(json.loads(json.dumps(uninterrupted.state_dict())))
    resumed.round_offset = 1  # the server's resume: round 1 of this start() is round 2
    expected, _ = aggregate_round(uninterrupted, second_round(), 2, SECOND_START)
    got, _ = aggregate_round(resumed, second_round(), 1, SECOND_START)
    np.testing.assert_array_equal(got["0"].numpy(), expected["0"].numpy())
    assert resumed.state_dict() == uninterrupted.state_dict()
    fresh = rule()
    fresh.load_state_dict({})
    assert fresh.first_moment is None and fresh.second_moment is None


@pytest.mark.parametrize("rule", [FedAdam, FedYogi])
def test_a_skipped_round_leaves_the_moments_as_they_were(rule):
    # Round 2's replies are within max_abs_weight = 1.5, but the step from w^t = 1.495
    # towards them (Δ > 0, m > 0) lands past it: the round is skipped, m and v stay.
    def replies(value):
        return [make_reply(n, [np.full(2, value)], {keys.NUM_EXAMPLES: 1}) for n in (1, 2)]

    strategy = rule(max_abs_weight=1.5)
    arrays, _ = aggregate_round(strategy, replies(0.1), 1, [np.zeros(2)])
    assert arrays is not None
    before = strategy.state_dict()
    arrays, _ = aggregate_round(strategy, replies(1.499), 2, [np.full(2, 1.495)])
    assert arrays is None
    assert strategy.train_records[2].skipped.startswith("the new global model has |w|")
    assert strategy.state_dict() == before


def test_float32_models_and_integer_arrays_keep_their_dtype():
    start = [np.array([1.0, 2.0], np.float32), np.array([7], np.int64)]
    replies = [
        make_reply(1, [np.array([2.0, 2.0], np.float32), np.array([7])], {keys.NUM_EXAMPLES: 1}),
        make_reply(2, [np.array([1.0, 0.0], np.float32), np.array([7])], {keys.NUM_EXAMPLES: 3}),
    ]
    strategy = FedAdam()
    new, _ = aggregate_round(strategy, replies, 1, start)
    assert new["0"].numpy().dtype == np.float32 and new["1"].numpy().dtype == np.int64
    np.testing.assert_allclose(new["0"].numpy(), [1.0961538, 1.9006623], rtol=1e-6)
    np.testing.assert_array_equal(new["1"].numpy(), [7])
    assert set(strategy.first_moment) == {"0"}  # no moment for the counter


def test_the_clients_learning_rate_is_the_runs_unless_given():
    messages = configure(FedAdam(), [1, 2], config={"lr": 0.1})
    assert all(m.content["config"][keys.LR] == 0.1 for m in messages)
    messages = configure(FedYogi(eta_l=10**-2.5), [1, 2], config={"lr": 0.1})
    assert all(m.content["config"][keys.LR] == 10**-2.5 for m in messages)


def test_registry_declarations_and_refused_settings():
    assert STRATEGIES["fedadam"].strategy is FedAdam
    assert STRATEGIES["fedyogi"].strategy is FedYogi
    assert STRATEGIES["fedadam"].defaults() == {
        "fedadam-eta": 0.1,
        "lr": None,
        "fedadam-beta-1": 0.9,
        "fedadam-beta-2": 0.99,
        "fedadam-tau": 1e-3,
        "fedadam-bias-correction": False,
    }
    assert STRATEGIES["fedyogi"].defaults()["fedyogi-eta"] == 0.01
    flamby = build_strategy("fedadam", {"fedadam-eta": 0.01, "fedadam-beta-2": 0.999, "lr": 0.01})
    assert flamby.settings() == {
        "eta": 0.01,
        "eta_l": 0.01,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "tau": 1e-3,
        "bias_correction": False,
    }
    with pytest.raises(
        ValueError, match=r"^run config fedadam-beta-2 \(rule fedadam\): beta_2 must be < 1, got 1"
    ):
        build_strategy("fedadam", {"fedadam-beta-2": 1.0})
    with pytest.raises(
        ValueError, match=r"^run config fedyogi-tau \(rule fedyogi\): tau must be > 0, got 0"
    ):
        build_strategy("fedyogi", {"fedyogi-tau": 0})
    with pytest.raises(ValueError, match=r"^eta must be > 0, got -0.1$"):
        FedYogi(eta=-0.1)


def test_ditto_pairs_with_the_server_optimisers():
    paired = build_strategy("ditto+fedyogi", {"fedyogi-eta": 0.02, "ditto-lambda": 0.1})
    alone = build_strategy("fedyogi", {"fedyogi-eta": 0.02})
    got, _ = aggregate_round(paired, first_round(), 1, START)
    want, _ = aggregate_round(alone, first_round(), 1, START)
    np.testing.assert_array_equal(got["0"].numpy(), want["0"].numpy())
    assert paired.train_config(1)[keys.DITTO_LAMBDA] == 0.1
