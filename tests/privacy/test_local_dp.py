"""dp = "local": clients clip and noise their update; the server adds nothing and accounts."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord

from fairfl.client.private_signal import local_dp_after
from fairfl.client.steps import CLIENT_STEPS
from fairfl.privacy.accounting import epsilon_of
from fairfl.privacy.config import PrivacySettings
from fairfl.privacy.signal import local_release
from fairfl.strategies import TERM
from fairfl.strategies.private import attach_privacy
from fairfl.strategies.qfedsgd import QFedSGD
from tests.privacy.test_central_dp import LN3, three_replies
from tests.strategies.baseline_helpers import aggregate_round, configure


def test_local_release_clips_the_update_then_adds_z_c_noise():
    sent, trained = [np.zeros(2)], [np.array([3.0, 4.0])]
    # ‖Δ‖ = 5 > C = 1: (0.6, 0.8); z = 0: no noise.
    np.testing.assert_allclose(
        local_release(trained, sent, 1.0, 0.0, np.random.default_rng(0))[0], [0.6, 0.8]
    )
    # z = 0.5, C = 1: + N(0, 0.5²) per value, the draws of the same seed.
    draws = np.random.default_rng(4).normal(0.0, 0.5, 2)
    released = local_release(trained, sent, 1.0, 0.5, np.random.default_rng(4))[0]
    np.testing.assert_allclose(released, np.array([0.6, 0.8]) + draws)
    # Inside the bound: the update is kept.
    rng = np.random.default_rng(0)
    kept = local_release([np.array([1.3, 1.0])], [np.array([1.0, 1.0])], 1.0, 0.0, rng)[0]
    np.testing.assert_allclose(kept, [1.3, 1.0])
    with pytest.raises(ValueError, match="dp=local noises every model array"):
        local_release([np.array([1])], [np.array([0])], 1.0, 0.5, np.random.default_rng(0))


def test_client_step_replaces_the_trained_weights_before_the_reply():
    config = ConfigRecord({"dp-local-noise-multiplier": 0.0, "dp-local-clipping-norm": 1.0})
    state = {"w": torch.tensor([3.0, 4.0])}
    round_ = SimpleNamespace(config=config, state=state, sent=ArrayRecord({"w": torch.zeros(2)}))
    assert local_dp_after(round_, np.random.default_rng(0)) == {}
    np.testing.assert_allclose(round_.state["w"].numpy(), [0.6, 0.8], rtol=1e-6)
    assert round_.state["w"].dtype == torch.float32
    after = [step.key for step in CLIENT_STEPS.active(ConfigRecord({
        "dp-local-noise-multiplier": 1.0, "dp-local-clipping-norm": 1.0, "qffl-q": 0.1,
    })) if step.phase == "after"]  # fmt: skip
    assert after == ["dp-local-noise-multiplier", "qffl-q"]


def test_server_sends_the_keys_adds_no_noise_and_accounts_without_amplification():
    strategy = TERM(alpha=LN3)
    settings = PrivacySettings(dp="local", dp_clipping_norm=6.0, dp_noise_multiplier=0.5)
    attach_privacy(strategy, settings, sampling_rate=0.5, seed=7)
    sent = configure(strategy, [1, 2, 3])[0].content["config"]
    assert sent["dp-local-noise-multiplier"] == 0.5
    assert sent["dp-local-clipping-norm"] == 6.0
    arrays, metrics = aggregate_round(strategy, three_replies())
    # The replies as sent (clients clipped): Σ λ w_k = (9·1 + 3·2 + 1·3) / 13 = 18/13 exactly.
    for array in arrays.values():
        np.testing.assert_allclose(array.numpy(), 18 / 13, rtol=1e-6)
    diagnostics = strategy.train_records[1].diagnostics
    assert diagnostics["dp-noise-std"] == pytest.approx(3.0)  # z C per client
    # Σ λ² (z C)² = 9 (81 + 9 + 1) / 169: σ = 3 √91 / 13 in the aggregate.
    assert diagnostics["dp-aggregate-noise-std"] == pytest.approx(3 * 91**0.5 / 13)
    # q = 1 although fraction-train is 0.5: the server knows who took part.
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, 0.5)], 1e-5))
    with pytest.raises(ValueError, match="dp='local' is refused for this rule"):
        attach_privacy(QFedSGD(), settings, sampling_rate=1.0, seed=0)


@pytest.mark.integration
def test_inprocess_local_dp_run_records_epsilon(tmp_path):
    from fairfl.simulation import run_inprocess

    config = {"num-partitions": 3, "num-server-rounds": 2, "strategy": "qffl", "dp": "local"}
    outcome = run_inprocess({**config, "out-dir": str(tmp_path)})
    rounds = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    epsilons = [r["train"]["diagnostics"]["dp-epsilon"] for r in rounds]
    assert epsilons == pytest.approx([epsilon_of([(1.0, 1.0)] * n, 1e-5) for n in (1, 2)])
    assert outcome.summary["privacy"]["dp"] == "local"
    # The clients' h_k read the released model, so the server accepted every reply.
    assert all(r["train"]["accepted"] == 3 for r in rounds)
