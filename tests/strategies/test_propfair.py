"""PropFair: the client-side log transform and the FedAvg server that sends its settings."""

import math

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.client.objectives import local_objective, propfair_loss
from fairfl.contract import keys
from fairfl.strategies import PropFair
from tests.strategies.baseline_helpers import (
    aggregate_round,
    assert_matches_fedavg,
    configure,
    loss_reply,
    round_weights,
    run_rule,
    shares,
)


def value_and_grad(loss: float, **kwargs) -> tuple[float, float]:
    ell = torch.tensor(loss, dtype=torch.float64, requires_grad=True)
    out = propfair_loss(ell, **kwargs)
    out.backward()
    return float(out.detach()), float(ell.grad)


# ---------------------------------------------------------------- the transform
@pytest.mark.parametrize("huber", [False, True])
def test_valid_region_is_minus_log_one_minus_loss_over_m(huber):
    # M = 3, ℓ = 1.5: M - ℓ = 1.5 >= 0.2, so -log(1 - 0.5) = log 2; d/dℓ = 1/(M - ℓ) = 2/3
    value, grad = value_and_grad(1.5, M=3.0, epsilon=0.2, huber=huber)
    assert value == pytest.approx(math.log(2.0))
    assert grad == pytest.approx(2.0 / 3.0)
    # At the switch, M - ℓ = ε exactly is still the log branch: ℓ = 2.5, M = 3, ε = 0.5:
    # -log(1 - 2.5/3) = log 6
    value, _ = value_and_grad(2.5, M=3.0, epsilon=0.5, huber=huber)
    assert value == pytest.approx(math.log(6.0))


@pytest.mark.parametrize(
    ("huber", "value", "grad"),
    [
        # M = 3, ℓ = 2.9: M - ℓ = 0.1 < 0.2 -> ℓ/M = 2.9/3, gradient 1/3
        (False, 2.9 / 3.0, 1.0 / 3.0),
        # huber: ℓ/ε = 2.9/0.2 = 14.5, gradient 1/ε = 5
        (True, 14.5, 5.0),
    ],
)
def test_fallback_branch(huber, value, grad):
    got_value, got_grad = value_and_grad(2.9, M=3.0, epsilon=0.2, huber=huber)
    assert got_value == pytest.approx(value)
    assert got_grad == pytest.approx(grad)


@pytest.mark.parametrize("huber", [False, True])
def test_losses_above_m_stay_finite_with_finite_gradient(huber):
    # CIFAR-100 at init: CE ≈ ln 100 ≈ 4.6 > M = 3; the unused log branch must not leak NaN.
    value, grad = value_and_grad(math.log(100.0), M=3.0, epsilon=0.2, huber=huber)
    assert math.isfinite(value) and math.isfinite(grad)
    assert grad == pytest.approx(5.0 if huber else 1.0 / 3.0)


def test_huber_gradient_is_continuous_at_the_switch():
    # Valid branch gradient at M - ℓ = ε is 1/ε; the huber fallback's is 1/ε too.
    _, left = value_and_grad(3.0 - 0.2 - 1e-9, M=3.0, epsilon=0.2, huber=True)
    _, right = value_and_grad(3.0 - 0.2 + 1e-9, M=3.0, epsilon=0.2, huber=True)
    assert left == pytest.approx(right, rel=1e-6)


@pytest.mark.parametrize("huber", [False, True])
@pytest.mark.parametrize("points", [[0.1, 1.0, 2.5], [2.85, 3.5, 10.0]], ids=["log", "fallback"])
def test_gradcheck(huber, points):
    ell = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: propfair_loss(x, M=3.0, epsilon=0.2, huber=huber), (ell,)
    )


def test_gradient_through_cross_entropy_is_the_scaled_ce_gradient():
    # d/dz [-log(1 - CE(z)/M)] = ∇_z CE / (M - CE)
    torch.manual_seed(0)
    logits = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 2, 1, 0])
    ce = torch.nn.functional.cross_entropy(logits, labels)
    (ce_grad,) = torch.autograd.grad(ce, logits, retain_graph=True)
    (pf_grad,) = torch.autograd.grad(propfair_loss(ce, M=4.0, epsilon=0.2), logits)
    torch.testing.assert_close(pf_grad, ce_grad / (4.0 - ce.detach()))


def test_large_m_is_fedavg_with_a_step_scaled_by_one_over_m():
    # -log(1 - ℓ/M) = ℓ/M + O((ℓ/M)^2)
    ell = torch.tensor([0.5, 2.0], dtype=torch.float64)
    torch.testing.assert_close(propfair_loss(ell, M=1e6, epsilon=0.2), ell / 1e6, rtol=1e-5, atol=0)


@settings(max_examples=100, deadline=None)
@given(
    st.floats(0.0, 1e4),
    st.floats(0.5, 100.0),
    st.floats(0.01, 0.49),
    st.booleans(),
)
def test_transform_is_finite_for_finite_losses(loss, m, epsilon, huber):
    value, grad = value_and_grad(loss, M=m, epsilon=epsilon, huber=huber)
    assert math.isfinite(value) and math.isfinite(grad) and grad > 0
    if m - loss >= epsilon:
        assert value == pytest.approx(-math.log(1 - loss / m))


def test_transform_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"M must be > 0, got 0\.0"):
        propfair_loss(torch.tensor(1.0), M=0.0, epsilon=0.2)
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, M=3\), got 3.0"):
        propfair_loss(torch.tensor(1.0), M=3.0, epsilon=3.0)


# ---------------------------------------------------------------- client config
def test_local_objective_uses_propfair_keys_when_present():
    assert local_objective(ConfigRecord({"lr": 0.1})).batch_objective is None
    objective = local_objective(
        ConfigRecord({keys.PROPFAIR_M: 3.0, keys.PROPFAIR_EPSILON: 0.2, keys.PROPFAIR_HUBER: True})
    )
    assert objective.batch_objective is not None
    # fallback with huber: 2.9/0.2
    assert float(objective.batch_objective(torch.tensor(2.9))) == pytest.approx(14.5)
    # ε and huber default to the reference code's 0.2 and False: 2.9/3
    only_m = local_objective(ConfigRecord({keys.PROPFAIR_M: 3}))
    assert float(only_m.batch_objective(torch.tensor(2.9))) == pytest.approx(2.9 / 3)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({keys.PROPFAIR_M: -1.0}, "'propfair-m' must be > 0, got -1.0"),
        (
            {keys.PROPFAIR_M: 3.0, keys.PROPFAIR_EPSILON: 5.0},
            r"'propfair-epsilon' must be in \(0, 3\)",
        ),
        ({keys.PROPFAIR_M: "3"}, "'propfair-m' must be float, got str"),
        ({keys.PROPFAIR_M: 3.0, keys.PROPFAIR_HUBER: 1}, "'propfair-huber' must be bool, got int"),
    ],
)
def test_local_objective_rejects_bad_keys(config, message):
    with pytest.raises(ValueError, match=message):
        local_objective(ConfigRecord(config))


# ---------------------------------------------------------------- the strategy
def test_strategy_sends_settings_and_averages_like_fedavg():
    strategy = PropFair(M=4.0, epsilon=0.3, huber=True)
    messages = configure(strategy, [1, 2])
    config = messages[0].content["config"]
    assert config[keys.PROPFAIR_M] == 4.0
    assert config[keys.PROPFAIR_EPSILON] == 0.3
    assert config[keys.PROPFAIR_HUBER] is True
    # No train_loss needed; p = (0.25, 0.75): 0.25·1 + 0.75·4 = 3.25
    replies = [loss_reply(1, 10, None, value=1.0), loss_reply(2, 30, None, value=4.0)]
    arrays, _ = aggregate_round(strategy, replies)
    np.testing.assert_allclose(round_weights(strategy), [0.25, 0.75])
    np.testing.assert_allclose(arrays["0"].numpy(), 3.25)
    assert_matches_fedavg(strategy, replies)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"M": 0.0}, "M must be > 0, got 0.0"),
        ({"M": math.nan}, "M must be a finite number, got nan"),
        ({"epsilon": 0.0}, "epsilon must be > 0, got 0.0"),
        ({"M": 2.0, "epsilon": 2.0}, r"epsilon must be < M \(2\), got 2.0"),
        ({"huber": "yes"}, "huber must be a bool, got 'yes'"),
    ],
)
def test_invalid_settings_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PropFair(**kwargs)


def test_three_rounds_in_process_train_on_the_transformed_loss(tmp_path):
    extra = {"propfair-m": 2.5, "propfair-huber": True, "lr": 0.1}
    outcome, rounds = run_rule(tmp_path / "propfair", "propfair", **extra)
    assert len(rounds) == 3
    for logged in rounds:
        np.testing.assert_allclose(logged.weights, shares(logged.counts), atol=1e-12)
        for config in logged.configs:
            assert config[keys.PROPFAIR_M] == 2.5 and config[keys.PROPFAIR_HUBER] is True
    assert outcome.summary["strategy_settings"] == {"M": 2.5, "epsilon": 0.2, "huber": True}
    # Same seed, same data, plain cross-entropy: the local models, so the global one, differ.
    baseline, _ = run_rule(tmp_path / "fedavg", "fedavg", lr=0.1)
    difference = max(
        float(np.max(np.abs(outcome.arrays[k].numpy() - baseline.arrays[k].numpy())))
        for k in outcome.arrays
    )
    assert difference > 1e-4
