"""RC-FL client: the smoothed objective, its gradients, the joint (ω, η) local steps."""

import math

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fairfl.client.rcfl import (
    RCFLSettings,
    effective_weight,
    rcfl_settings,
    smoothed_objective,
    train_rcfl,
)
from fairfl.client.training import train_local
from fairfl.contract.keys import (
    RCFL_ALPHA,
    RCFL_BATCH_SIZE,
    RCFL_ETA,
    RCFL_LOCAL_STEPS,
    RCFL_LR_ETA,
    RCFL_MU,
)
from fairfl.fields import ParameterError

CPU = torch.device("cpu")


def local_data(seed=0, n=40, d=6, classes=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = rng.integers(0, classes, size=n)
    return x, y


def linear_model(seed=0, d=6, classes=3):
    torch.manual_seed(seed)
    return nn.Linear(d, classes).double()


def params_of(model):
    return [p.detach().clone() for p in model.parameters()]


# ---------------------------------------------------------------- the objective
def test_objective_value_by_hand():
    # L = 0.9, η = 0.5, α = 0.5, μ = 0.1: φ_μ(0.4) = 0.1·log(1 + e^4) = 0.401815...
    value = smoothed_objective(torch.tensor(0.9), torch.tensor(0.5), alpha=0.5, mu=0.1)
    expected = 0.1 * math.log1p(math.exp(4.0)) / 0.5 + 0.5
    assert float(value) == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(1.30363, abs=1e-5)


@settings(max_examples=50, deadline=None)
@given(
    loss=st.floats(0.0, 10.0),
    eta=st.floats(-5.0, 10.0),
    alpha=st.floats(0.05, 1.0),
    mu=st.floats(0.01, 1.0),
)
def test_objective_is_within_the_smoothing_bias_of_the_hinge(loss, eta, alpha, mu):
    # (x)_+ <= φ_μ(x) <= (x)_+ + μ log 2 (spec-rcfl §3), divided by α, plus η.
    value = float(
        smoothed_objective(
            torch.tensor(loss, dtype=torch.float64),
            torch.tensor(eta, dtype=torch.float64),
            alpha=alpha,
            mu=mu,
        )
    )
    hinge = max(loss - eta, 0.0) / alpha + eta
    assert hinge - 1e-9 <= value <= hinge + mu * math.log(2) / alpha + 1e-9


def test_effective_weight_by_hand_and_for_extreme_gates():
    # σ((0.5 − 0.38)/0.1) = σ(1.2) = 0.76852; / 0.5 = 1.53704 (spec §2.4's q_2 ≈ 1.54)
    assert effective_weight(0.5, 0.38, alpha=0.5, mu=0.1) == pytest.approx(1.53704, abs=1e-5)
    assert effective_weight(100.0, 0.0, alpha=0.25, mu=0.01) == pytest.approx(4.0)
    assert effective_weight(0.0, 100.0, alpha=0.25, mu=0.01) == pytest.approx(0.0, abs=1e-300)


# ---------------------------------------------------------------- gradients
def objective_of(model, eta, x, y, alpha, mu):
    loss = nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    return smoothed_objective(loss, eta, alpha=alpha, mu=mu), loss


@pytest.mark.parametrize(
    ("eta0", "alpha", "mu"), [(1.0, 0.5, 0.1), (1.3, 0.2, 0.05), (0.2, 1.0, 0.5)]
)
def test_gradient_equals_q_times_loss_gradient_and_one_minus_q(eta0, alpha, mu):
    # Spec-rcfl §3 [D]: ∇_ω f^{μ,i} = q ∇f̂ⁱ, ∂_η f^{μ,i} = 1 − q, q = σ((L − η)/μ)/α.
    x, y = local_data()
    model = linear_model()
    eta = torch.tensor(eta0, dtype=torch.float64, requires_grad=True)
    objective, loss = objective_of(model, eta, x, y, alpha, mu)
    grads = torch.autograd.grad(objective, [*model.parameters(), eta])
    loss_grads = torch.autograd.grad(
        objective_of(model, eta, x, y, alpha, mu)[1], list(model.parameters())
    )
    q = effective_weight(float(loss.detach()), eta0, alpha=alpha, mu=mu)
    assert 0.05 < q * alpha < 0.95  # the gate is neither on nor off: a real test of σ
    for got, plain in zip(grads[:-1], loss_grads, strict=True):
        torch.testing.assert_close(got, q * plain, rtol=1e-12, atol=1e-14)
    assert float(grads[-1]) == pytest.approx(1.0 - q, rel=1e-12)


def test_gradient_matches_central_finite_differences():
    x, y = local_data(seed=3)
    model = linear_model(seed=3)
    alpha, mu, eta0 = 0.4, 0.1, 1.2
    eta = torch.tensor(eta0, dtype=torch.float64, requires_grad=True)
    objective, loss = objective_of(model, eta, x, y, alpha, mu)
    assert 0.05 < effective_weight(float(loss.detach()), eta0, alpha=alpha, mu=mu) * alpha < 0.95
    grads = torch.autograd.grad(objective, [*model.parameters(), eta])
    step = 1e-6

    def value():
        with torch.no_grad():
            return float(objective_of(model, eta, x, y, alpha, mu)[0])

    with torch.no_grad():
        for param, grad in zip([*model.parameters(), eta], grads, strict=True):
            flat, flat_grad = param.view(-1), grad.reshape(-1)
            for index in range(flat.numel()):
                saved = float(flat[index])
                flat[index] = saved + step
                upper = value()
                flat[index] = saved - step
                lower = value()
                flat[index] = saved
                numeric = (upper - lower) / (2 * step)
                assert float(flat_grad[index]) == pytest.approx(numeric, rel=1e-5, abs=1e-8)


# ---------------------------------------------------------------- local steps
def test_one_full_batch_step_is_the_simultaneous_gradient_step():
    # ω₁ = ω₀ − β q ∇L(ω₀),  η₁ = η₀ − β_η (1 − q), both at (ω₀, η₀) (Algorithm 1).
    x, y = local_data(seed=1)
    model, reference = linear_model(seed=1), linear_model(seed=1)
    config = RCFLSettings(eta=1.1, alpha=0.5, mu=0.2, local_steps=1, lr_eta=0.3)
    result = train_rcfl(model, x, y, settings=config, lr=0.05, device=CPU, seed=0)
    loss = nn.functional.cross_entropy(reference(torch.from_numpy(x)), torch.from_numpy(y))
    grads = torch.autograd.grad(loss, list(reference.parameters()))
    q = effective_weight(float(loss.detach()), 1.1, alpha=0.5, mu=0.2)
    for new, old, grad in zip(model.parameters(), reference.parameters(), grads, strict=True):
        torch.testing.assert_close(new.detach(), old.detach() - 0.05 * q * grad)
    assert result.eta == pytest.approx(1.1 - 0.3 * (1.0 - q), rel=1e-12)
    assert result.q_first == result.q_last == result.q_mean == pytest.approx(q)


def test_eta_step_defaults_to_the_model_step_size():
    x, y = local_data(seed=2)
    config = RCFLSettings(eta=1.0, alpha=0.5, mu=0.1, local_steps=1)
    result = train_rcfl(linear_model(seed=2), x, y, settings=config, lr=0.02, device=CPU, seed=0)
    assert result.eta == pytest.approx(1.0 - 0.02 * (1.0 - result.q_first), rel=1e-12)


def test_alpha_one_with_open_gates_is_plain_gradient_descent():
    # α = 1 and η₀ far below the loss: q = σ(huge) = 1 exactly, so the κ steps are
    # FedAvg's (train_local with one full batch per epoch), and η does not move.
    x, y = local_data(seed=4)
    rcfl_model, fedavg_model = linear_model(seed=4), linear_model(seed=4)
    config = RCFLSettings(eta=-1e3, alpha=1.0, mu=0.05, local_steps=4)
    result = train_rcfl(rcfl_model, x, y, settings=config, lr=0.1, device=CPU, seed=0)
    train_local(fedavg_model, x, y, epochs=4, batch_size=len(x), lr=0.1, device=CPU, seed=0)
    for ours, theirs in zip(rcfl_model.parameters(), fedavg_model.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert result.eta == -1e3
    assert result.q_mean == 1.0


def test_minibatch_steps_are_reproducible_and_gates_bounded():
    x, y = local_data(seed=5, n=50)
    config = RCFLSettings(eta=1.0, alpha=0.25, mu=0.1, local_steps=7, batch_size=16)
    first, second = linear_model(seed=5), linear_model(seed=5)
    a = train_rcfl(first, x, y, settings=config, lr=0.05, device=CPU, seed=9)
    b = train_rcfl(second, x, y, settings=config, lr=0.05, device=CPU, seed=9)
    assert a == b
    for p, q in zip(first.parameters(), second.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert 0.0 < a.q_mean < 1 / 0.25


def test_train_rcfl_rejects_bad_step_size_and_empty_split():
    config = RCFLSettings(eta=0.0, alpha=0.5, mu=0.1, local_steps=1)
    x, y = local_data()
    with pytest.raises(ValueError, match=r"lr must be > 0, got 0.0"):
        train_rcfl(linear_model(), x, y, settings=config, lr=0.0, device=CPU, seed=0)
    with pytest.raises(ValueError, match=r"cannot train on an empty split"):
        train_rcfl(linear_model(), x[:0], y[:0], settings=config, lr=0.1, device=CPU, seed=0)


# ---------------------------------------------------------------- config
def test_config_without_alpha_is_not_an_rcfl_round():
    assert rcfl_settings(ConfigRecord({"lr": 0.1, RCFL_ETA: 0.3})) is None


def test_config_is_read_with_defaults():
    config = ConfigRecord({RCFL_ETA: 0.3, RCFL_ALPHA: 0.5, RCFL_MU: 0.05, RCFL_LOCAL_STEPS: 5})
    assert rcfl_settings(config) == RCFLSettings(
        eta=0.3, alpha=0.5, mu=0.05, local_steps=5, lr_eta=None, batch_size=0
    )
    config[RCFL_LR_ETA] = 0.2
    config[RCFL_BATCH_SIZE] = 8
    settings_read = rcfl_settings(config)
    assert settings_read.lr_eta == 0.2 and settings_read.batch_size == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({RCFL_ALPHA: 0.0}, r"config key 'rcfl-alpha' must be in \(0, 1\], got 0.0"),
        ({RCFL_ALPHA: 1.5}, r"config key 'rcfl-alpha' must be in \(0, 1\], got 1.5"),
        ({RCFL_MU: 0.0}, r"config key 'rcfl-mu' must be > 0, got 0.0"),
        ({RCFL_ETA: float("nan")}, r"config key 'rcfl-eta' must be a finite number, got nan"),
        ({RCFL_LOCAL_STEPS: 0}, r"config key 'rcfl-local-steps' must be >= 1, got 0"),
        ({RCFL_LR_ETA: -1.0}, r"config key 'rcfl-lr-eta' must be > 0, got -1.0"),
        ({RCFL_BATCH_SIZE: -2}, r"config key 'rcfl-batch-size' must be >= 0, got -2"),
        ({RCFL_LOCAL_STEPS: 2.5}, r"config key 'rcfl-local-steps' must be int, got float"),
    ],
)
def test_bad_config_values_are_rejected_by_key(change, message):
    values = {RCFL_ETA: 0.3, RCFL_ALPHA: 0.5, RCFL_MU: 0.05, RCFL_LOCAL_STEPS: 5} | change
    with pytest.raises(ValueError, match=message):
        rcfl_settings(ConfigRecord(values))


def test_a_bad_value_is_a_parameter_error_naming_its_config_key():
    values = {RCFL_ETA: 0.3, RCFL_ALPHA: 0.5, RCFL_MU: -1.0, RCFL_LOCAL_STEPS: 5}
    with pytest.raises(ParameterError) as refused:
        rcfl_settings(ConfigRecord(values))
    assert (refused.value.name, refused.value.key) == ("mu", RCFL_MU)


def test_missing_key_is_named():
    with pytest.raises(ValueError, match=r"config key 'rcfl-mu' is missing"):
        rcfl_settings(ConfigRecord({RCFL_ETA: 0.3, RCFL_ALPHA: 0.5, RCFL_LOCAL_STEPS: 5}))
