"""AFL: simplex projection, projected λ ascent kept by client key, partial participation.

Two variants: Mohri et al.'s (the default: uniform λ^0, the running average of λ as
the weights) and the PropFair reference code's (``variant="propfair-code"``: λ^0 = p,
the last iterate).

Replies made here carry no partition id, so their client key is ``node-<id>``.
"""

import json
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.server.checkpoint import CHECKPOINT_FILE
from fairfl.simulation import run_inprocess
from fairfl.simulation.inprocess import node_configs_for
from fairfl.strategies import AFL
from fairfl.strategies.afl import (
    admit_clients,
    afl_lambda_update,
    project_to_simplex,
    running_average,
)
from tests.strategies.baseline_helpers import (
    aggregate_round,
    assert_matches_fedavg,
    client_rounds,
    loss_reply,
    round_weights,
    run_rule,
    shares,
)

finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)


class CrashError(RuntimeError):
    """The ServerApp dies mid-run."""


# ---------------------------------------------------------------- projection
@pytest.mark.parametrize(
    ("y", "expected"),
    [
        # u = (0.9, 0.5, 0); u_j + (1 - Σ_{r<=j} u_r)/j: 1, 0.5 - 0.4/2 = 0.3, 0 - 0.4/3 < 0
        # -> ρ = 2, τ = (1 - 1.4)/2 = -0.2 -> (0.7, 0.3, 0)
        ([0.9, 0.5, 0.0], [0.7, 0.3, 0.0]),
        # Σ = 1.3, all three kept (0.2 - 0.3/3 = 0.1 > 0): τ = -0.1 -> (0.5, 0.4, 0.1)
        ([0.6, 0.5, 0.2], [0.5, 0.4, 0.1]),
        # only the first is kept: 0.1 + (1 - 1.3)/2 = -0.05 <= 0 -> τ = 1 - 1.2 = -0.2
        ([1.2, 0.1, -0.5], [1.0, 0.0, 0.0]),
        # order does not matter: the same as the first row, permuted
        ([0.0, 0.9, 0.5], [0.0, 0.7, 0.3]),
    ],
)
def test_projection_by_hand(y, expected):
    np.testing.assert_allclose(project_to_simplex(y), expected, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(st.lists(finite, min_size=1, max_size=12))
def test_projection_returns_a_simplex_point_closest_to_y(y):
    x = project_to_simplex(y)
    assert np.all(x >= 0)
    assert x.sum() == pytest.approx(1.0, abs=1e-12)
    # No vertex of the simplex, nor the centre, is closer to y than x.
    n = len(y)
    candidates = [*np.eye(n), np.full(n, 1.0 / n)]
    distance = np.linalg.norm(x - np.asarray(y))
    assert all(distance <= np.linalg.norm(c - np.asarray(y)) + 1e-9 for c in candidates)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e3), min_size=1, max_size=12))
def test_projection_is_the_identity_on_the_simplex(raw):
    total = sum(raw)
    point = np.asarray(raw) / total if total > 0 else np.full(len(raw), 1.0 / len(raw))
    np.testing.assert_allclose(project_to_simplex(point), point, atol=1e-12)


def test_projection_rejects_bad_input():
    with pytest.raises(ValueError, match="non-empty 1-D vector"):
        project_to_simplex([])
    with pytest.raises(ValueError, match="y must be finite"):
        project_to_simplex([0.5, math.nan])


def test_lambda_update_and_admission_by_hand():
    # λ = (0.25, 0.75), f = (2, 1), γ = 0.1: y = (0.45, 0.85), Σ = 1.3, τ = -0.15
    np.testing.assert_allclose(afl_lambda_update([0.25, 0.75], [2.0, 1.0], 0.1), [0.3, 0.7])
    # No known client: λ^0 = p = (10, 30)/40.
    np.testing.assert_allclose(admit_clients([], [], [10, 30]), [0.25, 0.75])
    # Known (0.3, 0.7) with N_old = 40, new n = 40: N = 80, (0.3, 0.7)·0.5 and 40/80.
    np.testing.assert_allclose(admit_clients([0.3, 0.7], [10, 30], [40]), [0.15, 0.35, 0.5])
    with pytest.raises(ValueError, match=r"lambda_lr must be >= 0, got -1\.0"):
        afl_lambda_update([1.0], [1.0], -1.0)
    with pytest.raises(ValueError, match="same shape"):
        afl_lambda_update([1.0], [1.0, 2.0], 0.1)
    with pytest.raises(ValueError, match="client counts must all be > 0"):
        admit_clients([], [], [0])


# ---------------------------------------------------------------- the strategy
def test_running_average_by_hand():
    # λ^A_1 = (0.4, 0.6), λ^2 = (0.5, 0.5): λ^A_2 = (0.4 + 0.5, 0.6 + 0.5) / 2
    np.testing.assert_allclose(running_average([0.4, 0.6], [0.5, 0.5], 2), [0.45, 0.55])
    # t = 1: the first iterate, whatever the average held
    np.testing.assert_allclose(running_average([0.5, 0.5], [0.4, 0.6], 1), [0.4, 0.6])
    with pytest.raises(ValueError, match=r"steps must be an int >= 1, got 0"):
        running_average([1.0], [1.0], 0)
    with pytest.raises(ValueError, match=r"average and latest must have one shape"):
        running_average([1.0], [0.5, 0.5], 1)


def test_mohri_two_rounds_by_hand_uniform_start_and_averaged_lambda():
    strategy = AFL(lambda_lr=0.1)
    assert strategy.variant == "mohri"
    # n = (10, 30) plays no part: λ^0 = (0.5, 0.5). f = (1, 3): y = (0.6, 0.8),
    # τ = (1 - 1.4)/2 = -0.2, λ^1 = (0.4, 0.6) = λ^A_1: w = 0.4·0 + 0.6·10 = 6
    replies = [loss_reply(1, 10, 1.0, value=0.0), loss_reply(2, 30, 3.0, value=10.0)]
    arrays, _ = aggregate_round(strategy, replies, server_round=1)
    np.testing.assert_allclose(round_weights(strategy, 1), [0.4, 0.6])
    np.testing.assert_allclose(arrays["0"].numpy(), 6.0, rtol=1e-6)
    # f = (2, 0): y = (0.6, 0.6), λ^2 = (0.5, 0.5); λ^A_2 = (0.45, 0.55): w = 5.5
    replies = [loss_reply(1, 10, 2.0, value=0.0), loss_reply(2, 30, 0.0, value=10.0)]
    arrays, _ = aggregate_round(strategy, replies, server_round=2)
    np.testing.assert_allclose(round_weights(strategy, 2), [0.45, 0.55])
    np.testing.assert_allclose(arrays["0"].numpy(), 5.5, rtol=1e-6)
    assert strategy.client_lambdas == pytest.approx({"node-1": 0.5, "node-2": 0.5})
    assert strategy.client_average == pytest.approx({"node-1": 0.45, "node-2": 0.55})
    assert strategy.steps == 2


def test_mohri_admits_a_new_client_at_the_uniform_start():
    strategy = AFL(lambda_lr=0.1)
    aggregate_round(strategy, [loss_reply(1, 10, 1.0), loss_reply(2, 30, 3.0)], 1)
    # λ = λ^A = (0.4, 0.6). Node 3 joins alone: both become (0.4, 0.6)·2/3 and 1/3,
    # i.e. (8, 12, 10)/30. f_3 = 1: y = (8, 12, 13)/30, Σ = 1.1, τ = -0.1/3:
    # λ^2 = (7, 11, 12)/30; λ^A_2 = ((8, 12, 10) + (7, 11, 12))/60 = (7.5, 11.5, 11)/30
    aggregate_round(strategy, [loss_reply(3, 5, 1.0)], 2)
    np.testing.assert_allclose(round_weights(strategy, 2), [1.0])
    expected = {"node-1": 7 / 30, "node-2": 11 / 30, "node-3": 12 / 30}
    assert strategy.client_lambdas == pytest.approx(expected)
    expected = {"node-1": 7.5 / 30, "node-2": 11.5 / 30, "node-3": 11 / 30}
    assert strategy.client_average == pytest.approx(expected)


def test_mohri_lambda_lr_zero_is_the_plain_mean():
    # λ stays at 1/n whatever the losses and sizes: (1 + 4)/2 every round.
    strategy = AFL(lambda_lr=0.0)
    replies = [loss_reply(1, 10, 5.0, value=1.0), loss_reply(2, 30, 1.0, value=4.0)]
    for server_round in (1, 2, 3):
        arrays, _ = aggregate_round(strategy, replies, server_round)
        np.testing.assert_allclose(round_weights(strategy, server_round), [0.5, 0.5])
        np.testing.assert_allclose(arrays["0"].numpy(), 2.5, rtol=1e-6)


def test_propfair_code_two_rounds_by_hand_update_then_aggregate():
    strategy = AFL(lambda_lr=0.1, variant="propfair-code")
    replies = [loss_reply(1, 10, 2.0, value=1.0), loss_reply(2, 30, 1.0, value=4.0)]
    arrays, metrics = aggregate_round(strategy, replies, server_round=1)
    # λ^0 = p = (0.25, 0.75); λ^1 = Π(0.45, 0.85) = (0.3, 0.7), used in the same round:
    # w = 0.3·1 + 0.7·4 = 3.1
    np.testing.assert_allclose(round_weights(strategy, 1), [0.3, 0.7])
    np.testing.assert_allclose(arrays["0"].numpy(), 3.1, rtol=1e-6)
    assert metrics["afl-known-clients"] == 2
    # Round 2, same losses: y = (0.3 + 0.2, 0.7 + 0.1) = (0.5, 0.8), τ = -0.15 -> (0.35, 0.65)
    aggregate_round(strategy, replies, server_round=2)
    np.testing.assert_allclose(round_weights(strategy, 2), [0.35, 0.65])
    assert strategy.client_lambdas == pytest.approx({"node-1": 0.35, "node-2": 0.65})


def test_partial_participation_keeps_lambda_of_absent_clients():
    strategy = AFL(lambda_lr=0.1, variant="propfair-code")
    # Round 1, nodes 1-3, n = (10, 10, 20): λ^0 = (0.25, 0.25, 0.5); f = (1, 2, 3)
    # y = (0.35, 0.45, 0.8), Σ = 1.6, all kept (0.35 - 0.6/3 > 0), τ = -0.2
    # λ^1 = (0.15, 0.25, 0.6)
    aggregate_round(
        strategy, [loss_reply(1, 10, 1.0), loss_reply(2, 10, 2.0), loss_reply(3, 20, 3.0)], 1
    )
    np.testing.assert_allclose(round_weights(strategy, 1), [0.15, 0.25, 0.6])
    # Round 2, only nodes 1, 2 with f = (1, 1): y = (0.25, 0.35, 0.6), Σ = 1.2, τ = -0.2/3
    # λ^2 = (0.55/3, 0.85/3, 1.6/3); weights (0.55, 0.85)/1.4 = (11/28, 17/28)
    aggregate_round(strategy, [loss_reply(1, 10, 1.0), loss_reply(2, 10, 1.0)], 2)
    np.testing.assert_allclose(round_weights(strategy, 2), [11 / 28, 17 / 28])
    assert strategy.client_lambdas["node-3"] == pytest.approx(1.6 / 3)
    # Round 3, node 3 returns and node 4 (n = 40) joins: N_old = 40, N = 80, so the known
    # λ halve to (0.55/6, 0.85/6, 1.6/6) and λ_4 = 0.5. f_3 = f_4 = 1:
    # y = (0.55/6, 0.85/6, 1.6/6 + 0.1, 0.6), Σ = 1.2, all kept, τ = -0.05
    # λ^3 = (0.55/6 - 0.05, 0.85/6 - 0.05, 1.6/6 + 0.05, 0.55) = (0.25, 0.55, 1.9, 3.3)/6
    # weights (1.9, 3.3)/5.2 = (19/52, 33/52)
    aggregate_round(strategy, [loss_reply(3, 20, 1.0), loss_reply(4, 40, 1.0)], 3)
    np.testing.assert_allclose(round_weights(strategy, 3), [19 / 52, 33 / 52])
    expected = {"node-1": 0.25 / 6, "node-2": 0.55 / 6, "node-3": 1.9 / 6, "node-4": 3.3 / 6}
    assert strategy.client_lambdas == pytest.approx(expected)
    assert sum(strategy.client_lambdas.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "rounds",
    [
        [[(1, 10), (2, 30)]] * 3,  # full participation
        [[(1, 10), (2, 30), (3, 5)], [(2, 30)], [(1, 10), (3, 5), (4, 55)]],  # churn
    ],
)
def test_propfair_code_lambda_lr_zero_is_fedavg(rounds):
    afl = AFL(lambda_lr=0.0, variant="propfair-code")
    for server_round, participants in enumerate(rounds, start=1):
        replies = [loss_reply(n, c, float(n), value=float(n)) for n, c in participants]
        assert_matches_fedavg(afl, replies, server_round, atol=1e-12, rtol=1e-6)


def test_zero_participant_mass_falls_back_to_fedavg_and_warns_once(caplog):
    strategy = AFL(lambda_lr=0.1, variant="propfair-code")
    strategy.load_state_dict(
        {
            "lambdas": {"node-1": 1.0, "node-2": 0.0, "node-3": 0.0},
            "counts": {"node-1": 1, "node-2": 10, "node-3": 30},
        }
    )
    # Nodes 2, 3 report f = 0: y = (1, 0, 0) is on the simplex, their λ stay 0.
    replies = [loss_reply(2, 10, 0.0), loss_reply(3, 30, 0.0)]
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        aggregate_round(strategy, replies, 1)
        aggregate_round(strategy, replies, 2)
    np.testing.assert_allclose(round_weights(strategy, 2), [0.25, 0.75])
    assert caplog.text.count("using FedAvg weights") == 1


@pytest.mark.parametrize("variant", ["mohri", "propfair-code"])
def test_state_dict_is_json_and_resumes_the_same_trajectory(variant):
    replies = [loss_reply(5, 10, 2.0), loss_reply(9, 30, 0.5)]
    straight = AFL(lambda_lr=0.3, variant=variant)
    for r in (1, 2, 3):
        aggregate_round(straight, replies, r)
    first = AFL(lambda_lr=0.3, variant=variant)
    aggregate_round(first, replies, 1)
    state = json.loads(json.dumps(first.state_dict()))
    assert set(state) == {"lambdas", "average", "steps", "counts"}
    assert set(state["lambdas"]) == {"node-5", "node-9"} and state["steps"] == 1
    assert bool(state["average"]) == (variant == "mohri")
    resumed = AFL(lambda_lr=0.3, variant=variant)
    resumed.load_state_dict(state)
    for r in (2, 3):
        aggregate_round(resumed, replies, r)
    np.testing.assert_array_equal(round_weights(resumed, 3), round_weights(straight, 3))


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"lambdas": {"1": 1.0}}, r"state\['counts'\] must be a mapping"),
        ({"lambdas": {"1": 1.0}, "counts": {"2": 1}}, "must have the same client keys"),
        ({"lambdas": {"x": 1.0}, "counts": {"x": 1}}, "partition id or 'node-<id>', got 'x'"),
        ({"lambdas": {"1": -0.5}, "counts": {"1": 1}}, r"must be finite and >= 0, got -0.5"),
        ({"lambdas": {"1": "a"}, "counts": {"1": 1}}, "must be a number, got 'a'"),
        ({"lambdas": {"1": 1.0}, "counts": {"1": 0}}, r"state\['counts'\]\['1'\] must be an int"),
        (
            {"lambdas": {"1": 1.0}, "counts": {"1": 1}, "steps": -1},
            r"state\['steps'\] must be an int >= 0, got -1",
        ),
    ],
)
def test_bad_state_rejected_and_state_unchanged(state, message):
    strategy = AFL(variant="propfair-code")
    strategy.load_state_dict({"lambdas": {"7": 1.0}, "counts": {"7": 3}})
    with pytest.raises(ValueError, match=message):
        strategy.load_state_dict(state)
    assert strategy.client_lambdas == {"7": 1.0}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.1, "lambda_lr must be >= 0, got -0.1"),
        (math.inf, "lambda_lr must be a finite number, got inf"),
        ("0.1", "lambda_lr must be a finite number, got '0.1'"),
        (True, "lambda_lr must be a finite number, got True"),
    ],
)
def test_invalid_lambda_lr_rejected(value, message):
    with pytest.raises(ValueError, match=message):
        AFL(lambda_lr=value)


def test_invalid_variant_and_a_mohri_state_without_average_are_rejected():
    with pytest.raises(
        ValueError, match=r"variant must be one of \('mohri', 'propfair-code'\), got 'pf'"
    ):
        AFL(variant="pf")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"state\['average'\] must hold the running average"):
        AFL().load_state_dict({"lambdas": {"7": 1.0}, "counts": {"7": 3}})


# ---------------------------------------------------------------- properties
@settings(max_examples=40, deadline=None)
@given(
    st.lists(client_rounds(), min_size=1, max_size=4),
    st.floats(0.0, 10.0),
    st.sampled_from(["mohri", "propfair-code"]),
)
def test_weights_are_a_distribution_and_lambda_stays_on_the_simplex(rounds, lambda_lr, variant):
    strategy = AFL(lambda_lr=lambda_lr, variant=variant)
    for server_round, (counts, losses) in enumerate(rounds, start=1):
        # Node ids overlap between rounds: clients leave, return and join.
        replies = [
            loss_reply(server_round % 3 + i, c, f)
            for i, (c, f) in enumerate(zip(counts, losses, strict=True))
        ]
        arrays, _ = aggregate_round(strategy, replies, server_round)
        weights = round_weights(strategy, server_round)
        assert np.all(weights >= 0) and weights.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(np.isfinite(arrays["0"].numpy()))
        assert sum(strategy.client_lambdas.values()) == pytest.approx(1.0, abs=1e-12)
        if variant == "mohri":
            assert sum(strategy.client_average.values()) == pytest.approx(1.0, abs=1e-12)


# ---------------------------------------------------------------- end to end
def test_three_rounds_in_process_follow_the_lambda_recursion(tmp_path):
    outcome, rounds = run_rule(
        tmp_path, "afl", **{"afl-lambda-lr": 0.2, "afl-variant": "propfair-code"}
    )
    assert len(rounds) == 3
    lam = shares(rounds[0].counts)
    for logged in rounds:
        lam = afl_lambda_update(lam, logged.losses, 0.2)
        np.testing.assert_allclose(logged.weights, lam, atol=1e-12)
        assert logged.diagnostics["afl-known-clients"] == 5
    assert outcome.summary["strategy_settings"]["lambda_lr"] == 0.2
    stored = outcome.strategy.state_dict()["lambdas"]
    # Stored by partition id (the client key fairfl's ClientApp reports).
    partition = {node: c["partition-id"] for node, c in node_configs_for(5).items()}
    np.testing.assert_allclose(
        [stored[str(partition[n])] for n in rounds[-1].nodes], lam, atol=1e-12
    )
    assert all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())
    assert keys.LOSS_BEFORE_TRAINING in outcome.strategy.required_metrics


def test_crashed_run_resumes_with_the_same_lambdas(tmp_path):
    def crash_in_round_2(instruction, reply):
        if int(instruction.content["config"]["server-round"]) == 2:
            raise CrashError("killed in round 2")
        return reply

    # fraction-train 0.6: 3 of 5 clients a round, so λ of absent clients must survive too.
    config = {
        "strategy": "afl",
        "num-partitions": 5,
        "num-server-rounds": 3,
        "fraction-train": 0.6,
        "afl-lambda-lr": 0.5,
    }
    whole = run_inprocess({**config, "out-dir": str(tmp_path / "whole")})
    crashed = tmp_path / "crashed"
    with pytest.raises(CrashError):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round_2)
    resumed = run_inprocess(
        {**config, "out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)}
    )
    assert resumed.strategy.state_dict() == whole.strategy.state_dict()
    for key, array in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key].numpy(), array.numpy())


def test_empty_state_resets():
    strategy = AFL()
    strategy.load_state_dict({"lambdas": {"7": 1.0}, "average": {"7": 1.0}, "counts": {"7": 3}})
    strategy.load_state_dict({})
    assert strategy.state_dict() == {"lambdas": {}, "average": {}, "steps": 0, "counts": {}}
