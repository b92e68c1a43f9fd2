"""RC-FL server: the robust objective's math, per-node configs, (ω, η) averaging, state."""

import json
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.contract.keys import (
    RCFL_ALPHA,
    RCFL_BATCH_SIZE,
    RCFL_ETA,
    RCFL_LOCAL_STEPS,
    RCFL_LR_ETA,
    RCFL_MU,
)
from fairfl.strategies import RCFL, FedAvg
from fairfl.strategies.rcfl_dual import (
    client_alphas,
    draw_with_replacement,
    dual_objective,
    effective_weights,
    optimal_eta_interval,
    robust_loss,
    smoothed_dual_objective,
    smoothed_optimal_eta,
)
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import configure, local, pyproject_config

# The worked example of spec-rcfl §2.4.
P = np.array([0.5, 0.3, 0.2])
ALPHA = np.full(3, 0.5)
L = np.array([0.2, 0.5, 0.9])


def by_node(draws):
    """RC-FL's draws by node id (replies made here carry no partition id: ``node-<id>``)."""
    return {int(key.removeprefix("node-")): count for key, count in draws.items()}


def reply(node, count, eta, value=0.0, loss=None):
    metrics = {keys.NUM_EXAMPLES: count, keys.RCFL_ETA: eta}
    if loss is not None:
        metrics[keys.LOSS_BEFORE_TRAINING] = loss
    return make_reply(node, local(value), metrics)


# ====================================================================== math
class TestWorkedExample:
    """p = (0.5, 0.3, 0.2), α = 0.5, L = (0.2, 0.5, 0.9): caps p/α = (1.0, 0.6, 0.4)."""

    def test_primal_value_and_worst_case_weights(self):
        # Greedy: 0.9 takes its cap 0.4, 0.5 takes 0.6, the mass is used up: 0.36 + 0.3.
        value, lambdas = robust_loss(L, P, ALPHA)
        assert value == pytest.approx(0.66)
        np.testing.assert_allclose(lambdas, [0.0, 0.6, 0.4])

    def test_optimal_eta_is_the_whole_interval_from_0_2_to_0_5(self):
        assert optimal_eta_interval(L, P, ALPHA) == pytest.approx((0.2, 0.5))
        for eta in (0.2, 0.3, 0.35, 0.45, 0.5):
            assert dual_objective(eta, L, P, ALPHA) == pytest.approx(0.66)

    @pytest.mark.parametrize(("eta", "value"), [(0.1, 0.76), (0.6, 0.72), (1.0, 1.0), (0.0, 0.86)])
    def test_dual_is_larger_off_the_interval(self, eta, value):
        # η = 0.1: 0.1 + 1.0·0.1 + 0.6·0.4 + 0.4·0.8 = 0.76;  η = 0.6: 0.6 + 0.4·0.3 = 0.72.
        assert dual_objective(eta, L, P, ALPHA) == pytest.approx(value)

    def test_smoothed_optimum_at_small_mu(self):
        # Σ p q = 1 ⇔ σ((0.2−η)/μ) ≈ 0.6 σ((η−0.5)/μ) ⇒ η = (0.7 − μ log 0.6)/2 = 0.35255.
        eta = smoothed_optimal_eta(L, P, ALPHA, mu=0.01)
        assert eta == pytest.approx(0.35255, abs=1e-4)
        assert smoothed_dual_objective(eta, L, P, ALPHA, mu=0.01) == pytest.approx(0.66, abs=1e-4)
        q = effective_weights(L, eta, ALPHA, mu=0.01)
        np.testing.assert_allclose(q, [0.0, 2.0, 2.0], atol=1e-5)
        assert float(P @ q) == pytest.approx(1.0, abs=1e-10)

    def test_smoothed_optimum_at_mu_0_1(self):
        eta = smoothed_optimal_eta(L, P, ALPHA, mu=0.1)
        assert eta == pytest.approx(0.380, abs=1e-3)
        assert smoothed_dual_objective(eta, L, P, ALPHA, mu=0.1) == pytest.approx(0.691, abs=1e-3)
        np.testing.assert_allclose(
            effective_weights(L, eta, ALPHA, 0.1), [0.28, 1.54, 1.99], atol=0.01
        )


@st.composite
def federations(draw, max_clients=8):
    n = draw(st.integers(1, max_clients))
    raw = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=n, max_size=n)))
    p = raw / raw.sum()
    losses = np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=n, max_size=n)))
    mix = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    alphas = p + mix * (1.0 - p)  # α_i ∈ [p_i, 1]
    return losses, p, alphas


@settings(max_examples=100, deadline=None)
@given(federations())
def test_primal_equals_dual_at_the_breakpoints_and_on_the_interval(case):
    losses, p, alphas = case
    value, lambdas = robust_loss(losses, p, alphas)
    assert np.all(lambdas >= -1e-12) and np.all(lambdas <= p / alphas + 1e-12)
    assert float(lambdas.sum()) == pytest.approx(1.0)
    dual_min = min(dual_objective(eta, losses, p, alphas) for eta in losses)
    assert value == pytest.approx(dual_min, rel=1e-9, abs=1e-9)
    low, high = optimal_eta_interval(losses, p, alphas)
    for eta in (low, high, (low + high) / 2):
        if math.isfinite(eta):
            assert dual_objective(eta, losses, p, alphas) == pytest.approx(value, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(federations(), st.floats(0.01, 0.5))
def test_smoothing_bounds_and_the_smoothed_optimum(case, mu):
    # F ≤ F^μ ≤ F + μ τ_α log 2 (Lemma 2, tighter [D]); at η*_μ, Σ p q = 1.
    losses, p, alphas = case
    value = robust_loss(losses, p, alphas)[0]
    tau = float(np.sum(p / alphas))
    eta = smoothed_optimal_eta(losses, p, alphas, mu)
    if tau <= 1 + 1e-9:
        assert eta is None or float(p @ effective_weights(losses, eta, alphas, mu)) == (
            pytest.approx(1.0, abs=1e-6)
        )
        return
    assert eta is not None
    assert float(p @ effective_weights(losses, eta, alphas, mu)) == pytest.approx(1.0, abs=1e-8)
    smoothed = smoothed_dual_objective(eta, losses, p, alphas, mu)
    assert value - 1e-9 <= smoothed <= value + mu * tau * math.log(2) + 1e-9


@settings(max_examples=50, deadline=None)
@given(federations())
def test_alpha_one_is_the_fedavg_objective_and_alpha_p_the_max(case):
    losses, p, _ = case
    assert robust_loss(losses, p, np.ones_like(p))[0] == pytest.approx(float(p @ losses))
    assert robust_loss(losses, p, p)[0] == pytest.approx(float(losses.max()))


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_uniform_shares_with_alpha_k_over_n_is_the_mean_of_the_top_k(k):
    losses = np.array([0.3, 2.0, 0.1, 1.5, 0.7])
    p = np.full(5, 0.2)
    expected = np.sort(losses)[::-1][:k].mean()
    assert robust_loss(losses, p, np.full(5, k / 5))[0] == pytest.approx(expected)


def test_no_finite_optimum_when_every_alpha_is_one():
    assert smoothed_optimal_eta(L, P, np.ones(3), mu=0.1) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([0.2, np.nan], [0.5, 0.5], 0.5), r"losses must be finite"),
        (([0.2, 0.3], [0.6, 0.6], 0.5), r"p must be > 0 and sum to 1"),
        (([0.2, 0.3], [0.5, 0.5], 0.0), r"alphas must be in \(0, 1\]"),
        (([0.2, 0.3], [1.0], 0.5), r"losses and p must be non-empty 1-D vectors of one shape"),
    ],
)
def test_math_rejects_bad_inputs(args, message):
    with pytest.raises(ValueError, match=message):
        robust_loss(*args)


def test_client_alpha_rules():
    p = np.array([0.002, 0.01, 0.3, 0.688])
    # shared: α, but never below p_i.
    np.testing.assert_allclose(client_alphas(p, 0.5, "shared", 4), [0.5, 0.5, 0.5, 0.688])
    # uniform-cap, n = 4, α = 0.5: α_i = 2 p_i in [p_i, 1] -> caps p_i/α_i = 1/(α n) = 0.5.
    alphas = client_alphas(p, 0.5, "uniform-cap", 4)
    np.testing.assert_allclose(alphas, [0.004, 0.02, 0.6, 1.0])
    np.testing.assert_allclose((p / alphas)[:3], 0.5)
    with pytest.raises(ValueError, match=r"rule must be one of \('shared', 'uniform-cap'\)"):
        client_alphas(p, 0.5, "other", 4)


def test_draws_with_replacement_follow_p():
    rng = np.random.default_rng(0)
    draws = draw_with_replacement(rng, [7, 8, 9], np.array([0.7, 0.2, 0.1]), 20_000)
    assert sum(draws.values()) == 20_000 and set(draws) == {7, 8, 9}
    np.testing.assert_allclose(
        [draws[7] / 2e4, draws[8] / 2e4, draws[9] / 2e4], [0.7, 0.2, 0.1], atol=0.01
    )
    few = draw_with_replacement(np.random.default_rng(1), [1, 2], np.array([0.5, 0.5]), 3)
    assert sum(few.values()) == 3
    assert draw_with_replacement(rng, [1, 2], np.array([0.5, 0.5]), 0) == {}


# ====================================================================== strategy
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, r"alpha must be > 0, got 0.0"),
        ({"alpha": 1.2}, r"alpha must be <= 1, got 1.2"),
        ({"mu": 0.0}, r"mu must be > 0, got 0.0"),
        ({"eta_init": float("inf")}, r"eta_init must be a finite number, got inf"),
        ({"eta_probe": 1}, r"eta_probe must be a bool, got 1"),
        ({"local_steps": 0}, r"local_steps must be an int >= 1, got 0"),
        ({"batch_size": -1}, r"batch_size must be an int >= 0, got -1"),
        ({"eta_lr_scale": 0.0}, r"eta_lr_scale must be > 0, got 0.0"),
        (
            {"alpha_rule": "afl"},
            r"alpha_rule must be one of \('shared', 'uniform-cap'\), got 'afl'",
        ),
        ({"sampling": "uniform"}, r"sampling must be one of \('flower', 'with-replacement'\)"),
        ({"seed": -1}, r"seed must be an int >= 0, got -1"),
        ({"fraction_train": 2.0}, r"fraction_train must be in \[0, 1\], got 2.0"),
    ],
)
def test_constructor_rejects_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RCFL(**kwargs)


def test_configure_train_sends_each_node_its_own_config():
    strategy = RCFL(alpha=0.4, mu=0.1, eta_init=0.7, local_steps=3, batch_size=16, eta_lr_scale=2.0)
    caller = {"lr": 0.05, "batch-size": 32}
    messages = configure(strategy, [3, 1, 2], config=caller)
    assert [m.metadata.dst_node_id for m in messages] == [1, 2, 3]
    configs = [m.content["config"] for m in messages]
    assert len({id(c) for c in configs}) == 3  # one ConfigRecord per node
    for config in configs:
        assert config["server-round"] == 1
        assert config[RCFL_ETA] == 0.7 and config[RCFL_MU] == 0.1
        assert config[RCFL_LOCAL_STEPS] == 3 and config[RCFL_BATCH_SIZE] == 16
        assert config[RCFL_LR_ETA] == pytest.approx(0.1)  # 2 × lr
        assert config[RCFL_ALPHA] == 0.4  # round 1: counts unknown, shared α
    assert caller == {"lr": 0.05, "batch-size": 32}


def test_round_two_sends_per_client_alphas_from_the_learnt_counts():
    strategy = RCFL(alpha=0.5, alpha_rule="uniform-cap", eta_probe=False)
    configure(strategy, [1, 2, 3, 4])
    counts = {1: 2, 2: 10, 3: 300, 4: 688}  # p = (0.002, 0.01, 0.3, 0.688)
    strategy.aggregate_train(1, [reply(n, c, 0.5) for n, c in counts.items()])
    messages = configure(strategy, [1, 2, 3, 4], server_round=2)
    got = [m.content["config"][RCFL_ALPHA] for m in messages]
    np.testing.assert_allclose(got, [0.004, 0.02, 0.6, 1.0])


def test_a_node_with_unknown_count_gets_the_shared_alpha():
    strategy = RCFL(alpha=0.5, alpha_rule="uniform-cap", eta_probe=False)
    configure(strategy, [1, 2])
    strategy.aggregate_train(1, [reply(1, 10, 0.5), reply(2, 90, 0.5)])
    messages = configure(strategy, [1, 2, 3], server_round=2)
    # n = 2 known: α_1 = 0.5·2·0.1 = 0.1, α_2 = min(0.5·2·0.9, 1) = 0.9; node 3: α.
    got = {m.metadata.dst_node_id: m.content["config"][RCFL_ALPHA] for m in messages}
    assert got == pytest.approx({1: 0.1, 2: 0.9, 3: 0.5})


def test_aggregate_averages_omega_and_eta_with_data_shares():
    strategy = RCFL(alpha=0.5, mu=0.1, eta_init=0.35, eta_probe=False)
    configure(strategy, [1, 2, 3])
    replies = [
        reply(1, 50, 0.2, value=1.0, loss=0.2),
        reply(2, 30, 0.6, value=2.0, loss=0.5),
        reply(3, 20, 1.0, value=4.0, loss=0.9),
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    # ω = 0.5·1 + 0.3·2 + 0.2·4 = 1.9;  η = 0.5·0.2 + 0.3·0.6 + 0.2·1.0 = 0.48
    np.testing.assert_allclose(arrays["0"].numpy(), 1.9, rtol=1e-6)
    assert strategy.eta == pytest.approx(0.48)
    record = strategy.train_records[1]
    assert record.weights == pytest.approx({1: 0.5, 2: 0.3, 3: 0.2})
    q = effective_weights(L, 0.35, ALPHA, 0.1)
    assert record.diagnostics["rcfl-q"] == pytest.approx(dict(zip([1, 2, 3], q, strict=True)))
    assert record.diagnostics["rcfl-sum-pq"] == pytest.approx(float(P @ q))
    assert record.diagnostics["rcfl-robust-loss"] == pytest.approx(0.66)
    assert record.diagnostics["rcfl-eta-sent"] == 0.35
    assert metrics["rcfl-eta"] == pytest.approx(0.48)
    assert "rcfl-q" not in metrics  # per-client values go to rounds.jsonl only


def test_alpha_one_aggregates_exactly_like_fedavg():
    replies = [
        reply(1, 10, -5.0, value=1.0),
        reply(2, 30, -5.0, value=4.0),
        reply(3, 7, -5.0, value=-2.0),
    ]
    ours, fedavg = RCFL(alpha=1.0, eta_init=-5.0), FedAvg()
    configure(ours, [1, 2, 3])
    configure(fedavg, [1, 2, 3])
    rcfl_arrays, _ = ours.aggregate_train(1, replies)
    fedavg_arrays, _ = fedavg.aggregate_train(1, replies)
    for key in ("0", "1"):
        np.testing.assert_array_equal(rcfl_arrays[key].numpy(), fedavg_arrays[key].numpy())
    assert ours.train_records[1].weights == fedavg.train_records[1].weights
    assert ours.eta == -5.0


def test_reply_without_eta_is_dropped_and_the_rest_averaged():
    strategy = RCFL(eta_probe=False)
    configure(strategy, [1, 2, 3])
    replies = [
        reply(1, 10, 1.0, value=1.0),
        make_reply(2, local(9.0), {keys.NUM_EXAMPLES: 10}),
        reply(3, 30, 3.0, value=3.0),
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].dropped == {2: "metrics['rcfl-eta'] is missing"}
    np.testing.assert_allclose(arrays["0"].numpy(), 2.5)
    assert strategy.eta == pytest.approx(2.5)
    assert metrics["dropped-replies"] == 1


def test_eta_is_kept_when_the_round_keeps_the_old_model():
    strategy = RCFL(eta_init=0.3, eta_probe=False)
    configure(strategy, [1, 2])
    assert strategy.aggregate_train(1, [make_reply(1, error="crashed")]) == (None, None)
    assert strategy.eta == 0.3


def test_default_eta_update_is_algorithm_1s_average_also_with_losses():
    # Defaults: no eta probe (not in the paper). Every reply carries its loss, which the
    # probe would read; η^{t+1} = Σ_j p_j η_j all the same (Algorithm 1, "Average"):
    # round 1: 0.5·0.2 + 0.3·0.6 + 0.2·1.0 = 0.48; round 2: 0.5·0.1 + 0.3·0.3 + 0.2·0.5 = 0.24
    strategy = RCFL()
    assert strategy.eta_probe is False
    for server_round, etas, expected in ((1, (0.2, 0.6, 1.0), 0.48), (2, (0.1, 0.3, 0.5), 0.24)):
        configure(strategy, [1, 2, 3], server_round=server_round)
        replies = [
            reply(n, c, eta, loss=loss)
            for n, c, eta, loss in zip([1, 2, 3], [50, 30, 20], etas, L, strict=True)
        ]
        strategy.aggregate_train(server_round, replies)
        assert strategy.eta == pytest.approx(expected)
        assert "rcfl-probe" not in strategy.train_records[server_round].diagnostics


def test_probe_sets_eta_to_the_smoothed_optimum_of_the_first_losses(caplog):
    strategy = RCFL(alpha=0.5, mu=0.1, eta_init=0.0, eta_probe=True)
    configure(strategy, [1, 2, 3])
    replies = [
        reply(n, c, 0.01, loss=loss) for n, c, loss in zip([1, 2, 3], [50, 30, 20], L, strict=True)
    ]
    with caplog.at_level(logging.INFO, logger="fairfl"):
        strategy.aggregate_train(1, replies)
    assert strategy.eta == pytest.approx(smoothed_optimal_eta(L, P, ALPHA, 0.1))
    assert strategy.train_records[1].diagnostics["rcfl-probe"] == 1
    assert "eta probe sets eta" in caplog.text
    configure(strategy, [1, 2, 3], server_round=2)
    strategy.aggregate_train(
        2, [reply(n, c, 0.5, loss=0.3) for n, c in zip([1, 2, 3], [50, 30, 20], strict=True)]
    )
    assert strategy.eta == pytest.approx(0.5)  # the probe runs once


def test_probe_without_losses_keeps_the_average_and_warns(caplog):
    strategy = RCFL(alpha=0.5, eta_probe=True)
    configure(strategy, [1, 2])
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        strategy.aggregate_train(1, [reply(1, 10, 0.2), reply(2, 10, 0.4)])
    assert strategy.eta == pytest.approx(0.3)
    assert "eta probe needs loss-before-training in every reply" in caplog.text


def test_probe_with_all_alphas_one_keeps_the_average(caplog):
    strategy = RCFL(alpha=1.0, eta_probe=True)
    configure(strategy, [1, 2])
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        strategy.aggregate_train(1, [reply(1, 10, 0.2, loss=1.0), reply(2, 10, 0.4, loss=2.0)])
    assert strategy.eta == pytest.approx(0.3)
    assert "no finite root" in caplog.text


WR_NODES = tuple(range(1, 11))
WR_COUNTS = {n: 10 * n for n in WR_NODES}  # p_n = n / 55


class TestWithReplacementSampling:
    def first_round(self, **kwargs):
        strategy = RCFL(
            sampling="with-replacement", fraction_train=0.5, eta_probe=False, seed=3, **kwargs
        )
        messages = configure(strategy, list(WR_NODES))
        assert [m.metadata.dst_node_id for m in messages] == list(WR_NODES)  # full participation
        strategy.aggregate_train(1, [reply(n, c, 0.0) for n, c in WR_COUNTS.items()])
        assert strategy.train_records[1].weights[10] == pytest.approx(100 / 550)
        return strategy

    def test_later_rounds_draw_k_with_replacement_and_weight_count_over_k(self):
        strategy = self.first_round()
        messages = configure(strategy, list(WR_NODES), server_round=2)
        draws = by_node(strategy.draws[2])
        assert sum(draws.values()) == 5  # K = 0.5 × 10 draws
        assert sorted(draws) == [m.metadata.dst_node_id for m in messages]
        replies = [reply(n, WR_COUNTS[n], float(n), value=float(n)) for n in sorted(draws)]
        arrays, _ = strategy.aggregate_train(2, replies)
        expected = {n: c / 5 for n, c in draws.items()}
        assert strategy.train_records[2].weights == pytest.approx(expected)
        mean = sum(n * w for n, w in expected.items())
        np.testing.assert_allclose(arrays["0"].numpy(), mean, rtol=1e-6)
        assert strategy.eta == pytest.approx(mean)

    def test_a_missing_drawn_reply_renormalises_the_rest(self, caplog):
        strategy = self.first_round()
        configure(strategy, list(WR_NODES), server_round=2)
        draws = by_node(strategy.draws[2])
        assert len(draws) > 1  # seed 3: the 5 draws hit several nodes
        first = min(draws)
        kept = [reply(n, WR_COUNTS[n], 1.0) for n in sorted(draws) if n != first]
        with caplog.at_level(logging.INFO, logger="fairfl"):
            strategy.aggregate_train(2, kept)
        total = sum(c for n, c in draws.items() if n != first)
        assert strategy.train_records[2].weights == pytest.approx(
            {n: c / total for n, c in draws.items() if n != first}
        )
        assert "weights renormalised" in caplog.text

    def test_state_round_trip_continues_with_the_same_draws(self):
        strategy = self.first_round()
        state = json.loads(json.dumps(strategy.state_dict()))
        restored = RCFL(sampling="with-replacement", fraction_train=0.5, eta_probe=False, seed=99)
        restored.load_state_dict(state)
        assert restored.eta == strategy.eta and restored.client_counts == strategy.client_counts
        configure(strategy, list(WR_NODES), server_round=2)
        configure(restored, list(WR_NODES), server_round=2)
        assert restored.draws[2] == strategy.draws[2]


def test_state_dict_is_json_and_round_trips_eta():
    strategy = RCFL(eta_init=0.25, eta_probe=False)
    configure(strategy, [1, 2])
    strategy.aggregate_train(1, [reply(1, 10, 0.5), reply(2, 30, 0.9)])
    state = json.loads(json.dumps(strategy.state_dict()))
    assert state["eta"] == pytest.approx(0.8) and state["counts"] == {"node-1": 10, "node-2": 30}
    fresh = RCFL()
    fresh.load_state_dict(state)
    assert fresh.eta == pytest.approx(0.8) and fresh.probe_done is True
    assert fresh.client_counts == {"node-1": 10, "node-2": 30}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"eta": float("nan")}, r"state\['eta'\] must be a finite number, got nan"),
        ({"probe_done": "yes"}, r"state\['probe_done'\] must be a bool, got 'yes'"),
        ({"counts": [1, 2]}, r"state\['counts'\] must be a mapping of client key to count"),
        ({"counts": {"x": 3}}, r"client key must be a partition id or 'node-<id>', got 'x'"),
        ({"counts": {"1": 0}}, r"state\['counts'\]\['1'\] must be an int >= 1, got 0"),
        ({"rng": {"state": 1}}, r"state\['rng'\] must be a numpy PCG64 generator state"),
    ],
)
def test_load_state_dict_rejects_bad_state_and_keeps_the_old(change, message):
    strategy = RCFL(eta_init=0.1)
    state = {**RCFL().state_dict(), **change}
    with pytest.raises(ValueError, match=message):
        strategy.load_state_dict(state)
    assert strategy.eta == 0.1


def test_registry_builds_rcfl_with_pyproject_defaults():
    config = pyproject_config()
    spec = STRATEGIES["rcfl"]
    assert all(key.startswith("rcfl-") for key in spec.parameters)
    assert {key: config[key] for key in spec.parameters} == spec.defaults()
    strategy = build_strategy(
        "rcfl", {**config, "rcfl-alpha": 0.3, "rcfl-sampling": "with-replacement"}
    )
    assert isinstance(strategy, RCFL)
    assert strategy.alpha == 0.3 and strategy.sampling == "with-replacement"
    assert strategy.settings()["batch_size"] == "full"
