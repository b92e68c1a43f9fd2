"""FedFa under central DP: private accuracies, the noise on w̄ before the momentum (issue #49)."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord

from fairfl.client.builtin_steps import accuracy_before
from fairfl.client.private_signal import private_accuracy
from fairfl.contract import keys
from fairfl.privacy.accounting import epsilon_of
from fairfl.privacy.config import PrivacySettings
from fairfl.privacy.signal import noised_accuracy, round_noise_multiplier, scalar_noise_multiplier
from fairfl.strategies import TERM
from fairfl.strategies.fedfa import FedFa
from fairfl.strategies.fedmgda import FedMGDAPlus
from fairfl.strategies.fedopt import FedAdam
from fairfl.strategies.private import attach_privacy, privacy_refusal
from fairfl.strategies.rcfl import RCFL
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, configure

SIZE = 20_000  # model values: the noise's sample std is within 2 % of σ


def test_noised_accuracy_clips_to_zero_one_then_adds_noise_of_std_z():
    rng = np.random.default_rng(0)
    assert noised_accuracy(1.3, 0.0, rng) == 1.0
    assert noised_accuracy(-0.2, 0.0, rng) == 0.0
    assert noised_accuracy(0.7, 0.0, rng) == 0.7
    # z_A = 0.1: 0.7 + 0.1 d, d the seed's draw, kept inside [0, 1].
    draw = np.random.default_rng(1).normal(0.0, 1.0)
    expected = min(1.0, max(0.0, 0.7 + 0.1 * draw))
    assert noised_accuracy(0.7, 0.1, np.random.default_rng(1)) == pytest.approx(expected)
    # Many draws of 0.5 with z_A = 0.05 (10 sd inside the range): mean 0.5, std 0.05.
    rng = np.random.default_rng(2)
    draws = np.array([noised_accuracy(0.5, 0.05, rng) for _ in range(20_000)])
    assert draws.mean() == pytest.approx(0.5, abs=0.002)
    assert draws.std() == pytest.approx(0.05, rel=0.03)


def test_scalar_releases_compose_with_the_model_as_one_gaussian_by_hand():
    # Loss z_F = 2, accuracy z_A = 1: (1/4 + 1)^(-1/2) = 2/√5.
    assert scalar_noise_multiplier(2.0, 1.0) == pytest.approx(2 / math.sqrt(5))
    assert scalar_noise_multiplier(0.0, 3.0) == 3.0  # the loss in the clear: z_A alone
    assert scalar_noise_multiplier(0.0, 0.0) == 0.0  # nothing noised
    # Model z_eff = 2 with both: (1/4 + 1/4 + 1)^(-1/2) = (3/2)^(-1/2).
    assert round_noise_multiplier(2.0, scalar_noise_multiplier(2.0, 1.0)) == pytest.approx(
        math.sqrt(2 / 3)
    )
    settings = PrivacySettings(
        dp="central-fixed", dp_loss_noise_multiplier=2.0, dp_accuracy_noise_multiplier=1.0
    )
    assert settings.signal_noise_multiplier == pytest.approx(2 / math.sqrt(5))


def test_a_client_sends_its_accuracy_noised_only_when_asked():
    asked = ConfigRecord({"dp-accuracy-noise-multiplier": 0.1})
    draw = np.random.default_rng(3).normal(0.0, 1.0)
    noised = private_accuracy(asked, 0.8, np.random.default_rng(3))
    assert noised == pytest.approx(min(1.0, max(0.0, 0.8 + 0.1 * draw)))
    assert private_accuracy(ConfigRecord({}), 0.8) == 0.8
    # FedFa's step sends it: with z_A = 1e6 the noise dwarfs [0, 1], so the value sent
    # is an end of the range, never the 0.8 measured.
    step_round = SimpleNamespace(
        config=ConfigRecord({"dp-accuracy-noise-multiplier": 1e6}), accuracy_before=0.8
    )
    assert accuracy_before(step_round)[keys.ACC_BEFORE_TRAINING] in (0.0, 1.0)
    step_round.config = ConfigRecord({})
    assert accuracy_before(step_round)[keys.ACC_BEFORE_TRAINING] == 0.8


def accuracy_replies(size: int):
    """Nodes 1-3, node k's model all k over ``size`` values, accuracies (0.5, 0.25, 0.25)."""
    return [
        make_reply(
            k,
            [np.full(size, float(k), np.float32)],
            {keys.NUM_EXAMPLES: 10, keys.ACC_AFTER_TRAINING: acc},
        )
        for k, acc in zip((1, 2, 3), (0.5, 0.25, 0.25), strict=True)
    ]


def test_fedfa_under_central_dp_noises_the_average_before_its_momentum():
    # β = 0: p_k from the accuracy shares a = (1/2, 1/4, 1/4) alone (spec-fedfa F1-F5):
    # I = -log2(a) = (1, 2, 2) (up to the reference's 1e-6), p = I / 5 = (0.2, 0.4, 0.4).
    strategy = FedFa(beta=0.0, gamma=0.5, eta=0.1)
    assert privacy_refusal(strategy) is None
    settings = PrivacySettings(
        dp="central-fixed",
        dp_clipping_norm=6.0,
        dp_noise_multiplier=0.5,
        dp_accuracy_noise_multiplier=2.0,
    )
    attach_privacy(strategy, settings, sampling_rate=1.0, seed=7)
    start = [np.zeros(SIZE, np.float32)]
    sent = configure(strategy, [1, 2, 3], arrays=start)[0].content["config"]
    assert sent["dp-accuracy-noise-multiplier"] == 2.0  # the clients noise Acc_k
    arrays, metrics = aggregate_round(strategy, accuracy_replies(SIZE), arrays=start)
    record = strategy.train_records[1]
    assert list(record.weights.values()) == pytest.approx([0.2, 0.4, 0.4], rel=1e-5)
    # Every update (‖Δ_k‖ = k √SIZE) is clipped to C = 6: each value 6/√SIZE, so
    # w̄ = 6/√SIZE; σ = z C max p = 0.5 · 6 · 0.4 = 1.2.
    diagnostics = record.diagnostics
    assert diagnostics["dp-clip-fraction"] == 1.0
    assert diagnostics["dp-noise-std"] == pytest.approx(1.2, rel=1e-5)
    assert diagnostics["dp-lambda-max"] == pytest.approx(0.4, rel=1e-5)
    # The momentum step from the noised w̃ (w^0 = 0, m^0 = 0): m^1 = (1 - γ) w̃ = w̃ / 2 and
    # w^1 = w̃ - η m^1 = 0.95 w̃. The momentum kept is that of the noised average.
    (new,) = [a.numpy().astype(np.float64) for a in arrays.values()]
    noised_average = new / 0.95
    (momentum,) = strategy.momentum
    np.testing.assert_allclose(momentum, noised_average / 2, rtol=1e-5, atol=1e-6)
    assert np.std(noised_average - 6 / math.sqrt(SIZE)) == pytest.approx(1.2, rel=0.02)
    assert abs(np.mean(noised_average) - 6 / math.sqrt(SIZE)) < 4 * 1.2 / math.sqrt(SIZE)
    # One Gaussian of the model's z = 0.5 and the accuracies' z_A = 2: (4 + 1/4)^(-1/2).
    z_round = (4 + 1 / 4) ** -0.5
    assert diagnostics["dp-accuracy-noise-multiplier"] == 2.0
    assert diagnostics["dp-noise-multiplier-round"] == pytest.approx(z_round)
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, z_round)], 1e-5))
    assert strategy.privacy.summary()["accuracy_noise_multiplier"] == 2.0


def test_fedadam_under_central_dp_steps_from_the_noised_average():
    strategy = FedAdam()
    assert privacy_refusal(strategy) is None
    attach_privacy(
        strategy,
        PrivacySettings(dp="central-fixed", dp_clipping_norm=6.0, dp_noise_multiplier=0.5),
        sampling_rate=1.0,
        seed=7,
    )
    replies = [
        make_reply(k, [np.full(9, float(k), np.float32)], {keys.NUM_EXAMPLES: 10})
        for k in (1, 2, 3)
    ]
    arrays, _ = aggregate_round(strategy, replies, arrays=[np.zeros(9, np.float32)])
    diagnostics = strategy.train_records[1].diagnostics
    # Equal counts: λ = 1/3 each, σ = 0.5 · 6 / 3 = 1, added once (to w̄).
    assert diagnostics["dp-noise-std"] == pytest.approx(1.0)
    assert all(np.isfinite(a.numpy()).all() for a in arrays.values())


def test_accuracy_noise_for_a_rule_that_reads_no_accuracy_is_refused():
    settings = PrivacySettings(dp="central-fixed", dp_accuracy_noise_multiplier=1.0)
    with pytest.raises(ValueError, match="strategy term reads none: set it to 0"):
        attach_privacy(TERM(), settings, sampling_rate=1.0, seed=0)
    # The rules whose update is not of the unified form stay refused, naming why.
    with pytest.raises(ValueError, match="its sensitivity is not max λ·C"):
        attach_privacy(
            FedMGDAPlus(), PrivacySettings(dp="central-fixed"), sampling_rate=1.0, seed=0
        )


@pytest.mark.integration
def test_inprocess_fedfa_run_accounts_its_noised_accuracies(tmp_path):
    from fairfl.simulation import run_inprocess

    config = {
        "num-partitions": 3,
        "num-server-rounds": 2,
        "local-epochs": 1,
        "model": "logreg",
        "strategy": "fedfa",
        "dp": "central-fixed",
        "dp-accuracy-noise-multiplier": 0.5,
        "out-dir": str(tmp_path),
    }
    outcome = run_inprocess(config)
    lines = (tmp_path / "rounds.jsonl").read_text().splitlines()
    rounds = [json.loads(line)["train"]["diagnostics"] for line in lines]
    z_round = (1.0 + 0.5**-2) ** -0.5  # model z = 1, accuracies z_A = 0.5
    assert [r["dp-noise-multiplier-round"] for r in rounds] == pytest.approx([z_round] * 2)
    assert rounds[-1]["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, z_round)] * 2, 1e-5))
    assert all("fedfa-momentum-norm" in r for r in rounds)
    assert outcome.summary["privacy"]["accuracy_noise_multiplier"] == 0.5
    assert all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())


@pytest.mark.parametrize("mode", ["central-fixed", "central-adaptive", "local", "distributed"])
def test_rcfl_is_refused_under_every_mode_for_its_clear_eta(mode):
    # η^{t+1} = Σ W_j η_j of the clients' clear η_j reaches every client: no noise covers it.
    with pytest.raises(ValueError, match=f"dp='{mode}' is refused for this rule: RC-FL's"):
        attach_privacy(RCFL(), PrivacySettings(dp=mode), sampling_rate=1.0, seed=0)
