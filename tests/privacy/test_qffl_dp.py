"""q-FFL under central DP: h_k from the clipped update, σ from the step's own bound."""

import numpy as np
import pytest

from fairfl.contract import keys
from fairfl.privacy.accounting import epsilon_of
from fairfl.privacy.config import PrivacySettings
from fairfl.strategies.private import attach_privacy
from fairfl.strategies.qffl import QFFL
from fairfl.strategies.qffl_step import qffl_sensitivity_share
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, local, round_weights


def private_qffl(q: float = 1.0, **dp: float) -> QFFL:
    strategy = QFFL(q=q, client_learning_rate=1.0)  # L = 1
    attach_privacy(strategy, PrivacySettings(dp="central-fixed", **dp), sampling_rate=1.0, seed=3)
    return strategy


def dominant_replies() -> list:
    # F = (1, 3): client 2 dominates. Its model is all 1 over the 9 values (‖d‖ = 3, clipped
    # to C = 1: all 1/3); client 1's is all 0.2 (‖d‖² = 0.36). Each sends a wrong qffl-h, which
    # DP ignores (it read the unclipped update).
    return [
        make_reply(
            1,
            local(0.2),
            {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: 1.0, keys.QFFL_H: 100.0},
        ),
        make_reply(
            2,
            local(1.0),
            {keys.NUM_EXAMPLES: 5, keys.LOSS_BEFORE_TRAINING: 3.0, keys.QFFL_H: 100.0},
        ),
    ]


def test_sensitivity_share_by_hand():
    # q = 1, L = 1, C = 1: a = F = (1, 3), ĥ = a + q L² F^0 C² = (2, 4), A' = (3, 1):
    # S / C = max(2 / 5, 4 / 5) = 0.8.
    assert qffl_sensitivity_share([1.0, 3.0], q=1.0, lipschitz=1.0, clipping_norm=1.0) == (
        pytest.approx(0.8)
    )
    # q = 0: ĥ = a, the weighted mean's λ_max (uniform: 1/m).
    assert qffl_sensitivity_share(
        [1.0, 3.0, 5.0], q=0.0, lipschitz=2.0, clipping_norm=7.0
    ) == pytest.approx(1 / 3)


def test_sensitivity_share_bounds_zeroing_any_client():
    # The derivation's claim, checked on random clipped updates: zeroing client k's update
    # moves q-FFL's step by at most C · S/C.
    rng = np.random.default_rng(0)
    q, lip, clip = 2.0, 0.5, 1.5
    for _ in range(200):
        losses = rng.uniform(0.1, 4.0, size=4)
        share = qffl_sensitivity_share(losses, q=q, lipschitz=lip, clipping_norm=clip)
        d = rng.normal(size=(4, 5))
        d *= (clip * rng.uniform(0, 1, size=4) / np.linalg.norm(d, axis=1))[:, None]

        def step(updates, losses=losses):
            a = lip * losses**q
            h = a + q * lip**2 * losses ** (q - 1) * np.sum(updates**2, axis=1)
            return (a[:, None] * updates).sum(axis=0) / h.sum()

        for k in range(4):
            zeroed = d.copy()
            zeroed[k] = 0
            assert np.linalg.norm(step(d) - step(zeroed)) <= clip * share * (1 + 1e-12)


def test_qffl_round_with_a_dominant_client_by_hand():
    strategy = private_qffl(dp_clipping_norm=1.0, dp_noise_multiplier=2.0)
    arrays, metrics = aggregate_round(strategy, dominant_replies())
    # Clipped ‖d‖² = (0.36, 1): h = F + q F^0 ‖d‖² = (1.36, 4), λ = F / Σh = (1, 3) / 5.36.
    np.testing.assert_allclose(round_weights(strategy), [1 / 5.36, 3 / 5.36], rtol=1e-6)
    diagnostics = strategy.train_records[1].diagnostics
    assert diagnostics["dp-clip-fraction"] == pytest.approx(0.5)
    assert diagnostics["qffl-client-h"] == 0  # the clients' h is not used under DP
    assert diagnostics["dp-sensitivity-weight"] == pytest.approx(0.8)
    assert diagnostics["dp-lambda-max"] == pytest.approx(3 / 5.36, rel=1e-6)
    # σ = z C S/C = 2 · 1 · 0.8, above Flower's z C / m = 1 and z C λ_max = 1.12.
    assert diagnostics["dp-noise-std"] == pytest.approx(1.6)
    assert diagnostics["dp-noise-multiplier-effective"] == pytest.approx(2.0)
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, 2.0)], 1e-5))
    # Σ λ w̄_k = (0.2 + 3 / 3) / 5.36 per value, plus noise of std 1.6.
    values = np.concatenate([a.numpy().ravel() for a in arrays.values()])
    assert np.all(values != pytest.approx(1.2 / 5.36))


def test_qffl_cap_mode_records_its_bound_exceeding_the_noise():
    # cap: σ = z C κ / m = 2 · 1 · 1 / 4 (m = 4 nodes sampled) = 0.5 < z C S = 1.6:
    # z_eff = 0.5 / 0.8 = 0.625, recorded and accounted.
    strategy = private_qffl(dp_clipping_norm=1.0, dp_noise_multiplier=2.0, dp_calibration="cap")
    _, metrics = aggregate_round(strategy, dominant_replies())
    diagnostics = strategy.train_records[1].diagnostics
    assert diagnostics["dp-noise-std"] == pytest.approx(0.5)
    assert diagnostics["dp-noise-multiplier-effective"] == pytest.approx(0.625)
    assert diagnostics["dp-weights-exceed-noise"] == 1
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, 0.625)], 1e-5))
