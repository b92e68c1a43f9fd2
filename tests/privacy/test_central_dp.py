"""Central DP with fixed clipping calibrated to a fair rule's weights (issue #49)."""

import itertools
import json
import math

import dp_accounting
import numpy as np
import pytest

from fairfl.fields import ParameterError
from fairfl.privacy.accounting import PrivacyAccount, epsilon_of
from fairfl.privacy.central import (
    CentralFixedClipping,
    clip_update,
    effective_noise_multiplier,
    noise_std,
)
from fairfl.privacy.config import PrivacySettings
from fairfl.settings import RunSettings
from fairfl.strategies import TERM
from fairfl.strategies.fedmgda import FedMGDAPlus
from fairfl.strategies.private import attach_privacy, privacy_refusal
from fairfl.strategies.qfedsgd import QFedSGD
from tests.strategies.baseline_helpers import aggregate_round, loss_reply, round_weights

LN3 = math.log(3.0)


def private_term(**dp):
    """TERM (α = ln 3) with central DP; the replies of :func:`three_replies`."""
    strategy = TERM(alpha=LN3)
    settings = PrivacySettings(dp="central-fixed", **dp)
    attach_privacy(strategy, settings, sampling_rate=1.0, seed=7)
    return strategy


def three_replies():
    # n = (10, 10, 10), f = (2, 1, 0): λ ∝ e^{α f} = (9, 3, 1) / 13. Client k's model is
    # all k over the 9 values of GLOBAL (zeros): ‖Δ_k‖ = 3k = (3, 6, 9).
    return [loss_reply(k, 10, float(3 - k), value=float(k)) for k in (1, 2, 3)]


def test_clip_update_by_hand():
    local, start = [np.array([3.0, 4.0])], [np.array([0.0, 0.0])]
    clipped, was = clip_update(local, start, 1.0)  # ‖(3, 4)‖ = 5 -> (0.6, 0.8)
    np.testing.assert_allclose(clipped[0], [0.6, 0.8])
    assert was
    np.testing.assert_array_equal(local[0], [3.0, 4.0])  # inputs unchanged
    same, was = clip_update([np.array([1.0, 1.0])], [np.array([1.0, 0.0])], 1.0)  # ‖Δ‖ = 1
    np.testing.assert_allclose(same[0], [1.0, 1.0])
    assert not was
    zero, was = clip_update(start, start, 1.0)  # ‖Δ‖ = 0: no division by it
    np.testing.assert_array_equal(zero[0], [0.0, 0.0])
    assert not was


def test_noise_std_is_z_c_max_weight_and_flowers_for_uniform_weights():
    assert noise_std(1.1, 2.0, 1 / 4) == pytest.approx(1.1 * 2.0 / 4)  # Flower's z C / m
    assert noise_std(0.5, 6.0, 9 / 13) == pytest.approx(27 / 13)
    # Flower's σ = z C / m under a weight of 9/13 on m = 3: z_eff = (1/3) / (9/13) z
    assert effective_noise_multiplier(1.0 * 6.0 / 3, 6.0, 9 / 13) == pytest.approx(13 / 27)


def test_term_round_by_hand():
    strategy = private_term(dp_clipping_norm=6.0, dp_noise_multiplier=0.5)
    arrays, metrics = aggregate_round(strategy, three_replies())
    np.testing.assert_allclose(round_weights(strategy), np.array([9, 3, 1]) / 13)
    diagnostics = strategy.train_records[1].diagnostics
    # C = 6 clips client 3 (‖Δ‖ = 9 -> its model 2); client 2 (‖Δ‖ = 6) is kept.
    assert diagnostics["dp-clip-fraction"] == pytest.approx(1 / 3)
    # σ = z C λ_max = 0.5 · 6 · 9/13 = 27/13; z_eff = z.
    assert diagnostics["dp-noise-std"] == pytest.approx(27 / 13)
    assert diagnostics["dp-noise-multiplier-effective"] == pytest.approx(0.5)
    assert diagnostics["dp-weights-exceed-noise"] == 0
    assert diagnostics["dp-calibration"] == "max-weight"
    # Σ λ clip(w_k) = (9·1 + 3·2 + 1·2) / 13 = 17/13, plus the noise: not equal to it.
    noise = np.concatenate([a.numpy().ravel() for a in arrays.values()]) - 17 / 13
    assert np.all(noise != 0)
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, 0.5)], 1e-5))
    # The same seed draws the same noise.
    again, _ = aggregate_round(
        private_term(dp_clipping_norm=6.0, dp_noise_multiplier=0.5), three_replies()
    )
    for key, array in arrays.items():
        np.testing.assert_array_equal(again[key].numpy(), array.numpy())


def test_empirical_noise_std_matches_the_formula():
    privacy = CentralFixedClipping(
        PrivacySettings(dp="central-fixed", dp_clipping_norm=6.0, dp_noise_multiplier=0.5),
        sampling_rate=1.0,
    )
    noised, diagnostics = privacy.release([np.zeros(200_000)], [9 / 13, 3 / 13, 1 / 13], sampled=3)
    assert diagnostics["dp-noise-std"] == pytest.approx(27 / 13)
    # 200 000 draws: the sample std is within 1 % of σ with overwhelming probability.
    assert np.std(noised[0]) == pytest.approx(27 / 13, rel=0.01)


def test_cap_mode_renormalises_to_the_cap():
    # m = 5 sampled (3 repliers and the 2 spare nodes), κ = 2: cap 0.4. (9, 3, 1)/13 =
    # (0.69, 0.23, 0.08) -> client 1 capped at 0.4, its excess spread 3:1 gives client 2
    # 0.45 > 0.4 -> capped too; client 3 takes the rest: (0.4, 0.4, 0.2), summing to 1.
    strategy = private_term(
        dp_clipping_norm=6.0, dp_noise_multiplier=0.5, dp_calibration="cap", dp_weight_cap=2.0
    )
    aggregate_round(strategy, three_replies())
    np.testing.assert_allclose(round_weights(strategy), [0.4, 0.4, 0.2])
    diagnostics = strategy.train_records[1].diagnostics
    assert diagnostics["dp-noise-std"] == pytest.approx(0.5 * 6.0 * 2 / 5)  # z C κ / m
    assert diagnostics["dp-noise-multiplier-effective"] == pytest.approx(0.5)
    assert diagnostics["dp-weights-exceed-noise"] == 0


def test_cap_mode_says_when_the_weights_exceed_the_noise():
    # κ = 1, m = 5: cap 0.2, which 3 replies cannot meet (uniform 1/3 is the least max):
    # z_eff = (z C / 5) / (C / 3) = 0.6 z, recorded and accounted.
    strategy = private_term(dp_clipping_norm=6.0, dp_noise_multiplier=0.5, dp_calibration="cap")
    _, metrics = aggregate_round(strategy, three_replies())
    np.testing.assert_allclose(round_weights(strategy), [1 / 3] * 3)
    diagnostics = strategy.train_records[1].diagnostics
    assert diagnostics["dp-weights-exceed-noise"] == 1
    assert diagnostics["dp-noise-multiplier-effective"] == pytest.approx(0.3)
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, 0.3)], 1e-5))


def test_epsilon_equals_dp_accountings_and_grows_with_rounds():
    q, z, delta = 0.1, 1.1, 1e-5
    account = PrivacyAccount(delta)
    epsilons = [account.compose(q, z) for _ in range(8)]
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, 8))
    assert epsilons[-1] == pytest.approx(accountant.get_epsilon(delta), rel=1e-9)
    assert all(a < b for a, b in itertools.pairwise(epsilons))
    restored = PrivacyAccount(delta)
    restored.load_state(json.loads(json.dumps(account.state())))
    assert restored.epsilon() == epsilons[-1]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("dp", "gaussian", "run config dp must be one of"),
        ("dp-clipping-norm", 0.0, "run config dp-clipping-norm must be > 0, got 0.0"),
        ("dp-noise-multiplier", -1.0, "run config dp-noise-multiplier must be"),
        ("dp-delta", 1.5, r"run config dp-delta must be in \(0, 1\), got 1.5"),
        ("dp-weight-cap", 0.5, r"run config dp-weight-cap must be >= 1 \(κ in κ/m\), got 0.5"),
        ("dp-calibration", "mean", "run config dp-calibration must be one of"),
    ],
)
def test_bad_value_is_refused_naming_the_key(key, value, message):
    with pytest.raises(ParameterError, match=message) as refused:
        RunSettings.from_run_config({key: value})
    assert refused.value.key == key


def test_dp_with_secure_aggregation_is_refused():
    with pytest.raises(ValueError, match="run config dp and secure-aggregation are both on"):
        RunSettings.from_run_config({"dp": "central-fixed", "secure-aggregation": "secagg+"})


@pytest.mark.parametrize("rule", [FedMGDAPlus, QFedSGD])
def test_rules_without_the_max_weight_bound_are_refused(rule):
    strategy = rule()
    assert privacy_refusal(strategy) is not None
    with pytest.raises(ValueError, match="is refused for this rule"):
        attach_privacy(strategy, PrivacySettings(dp="central-fixed"), sampling_rate=1.0, seed=0)
    assert privacy_refusal(TERM()) is None


def rounds_of(path):
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


def test_inprocess_run_records_epsilon_per_round(tmp_path):
    from fairfl.simulation import run_inprocess

    config = {
        "num-partitions": 3,
        "num-server-rounds": 2,
        "strategy": "term",
        "dp": "central-fixed",
    }
    outcome = run_inprocess({**config, "out-dir": str(tmp_path)})
    epsilons = [r["train"]["diagnostics"]["dp-epsilon"] for r in rounds_of(tmp_path)]
    assert epsilons == pytest.approx([epsilon_of([(1.0, 1.0)] * n, 1e-5) for n in (1, 2)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["privacy"]["epsilon"] == pytest.approx(epsilons[-1])
    assert outcome.strategy.privacy is not None


def whole_and_resumed(tmp_path, config):
    """``config`` run whole, and run again crashed in round 3 then resumed: both outcomes."""
    from fairfl.server.checkpoint import CHECKPOINT_FILE
    from fairfl.simulation import run_inprocess
    from tests.server.test_checkpoint_resume import ServerCrashError, crash_in_round

    whole = run_inprocess({**config, "out-dir": str(tmp_path / "whole")})
    crashed = tmp_path / "crashed"
    with pytest.raises(ServerCrashError):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round(3))
    resumed = run_inprocess(
        {**config, "out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)}
    )
    return whole, resumed


@pytest.mark.integration
def test_resumed_dp_run_ends_with_the_same_model_and_epsilon(tmp_path):
    config = {
        "num-partitions": 4,
        "num-server-rounds": 4,
        "fraction-train": 0.75,
        "strategy": "term",
        "dp": "central-fixed",
        "dp-calibration": "cap",
    }
    whole, resumed = whole_and_resumed(tmp_path, config)
    for key, array in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key].numpy(), array.numpy())
    assert resumed.summary["privacy"]["epsilon"] == whole.summary["privacy"]["epsilon"]
    assert resumed.summary["privacy"]["released_rounds"] == 4
