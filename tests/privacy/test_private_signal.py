"""The fairness signal under DP: clients clip and noise F_k(w^t); the account composes it."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord

from fairfl.client.private_signal import private_loss_before
from fairfl.client.steps import CLIENT_STEPS
from fairfl.privacy.accounting import epsilon_of
from fairfl.privacy.config import PrivacySettings
from fairfl.privacy.signal import noised_loss, round_noise_multiplier
from fairfl.settings import RunSettings
from fairfl.strategies import TERM
from fairfl.strategies.private import attach_privacy
from tests.privacy.test_central_dp import LN3, three_replies
from tests.strategies.baseline_helpers import aggregate_round, configure


def test_noised_loss_clips_to_the_bound_then_adds_noise_of_std_z_b():
    # z_F = 0: the clip alone.
    rng = np.random.default_rng(0)
    assert noised_loss(7.0, 5.0, 0.0, rng) == 5.0
    assert noised_loss(-1.0, 5.0, 0.0, rng) == 0.0
    assert noised_loss(2.0, 5.0, 0.0, rng) == 2.0
    # z_F = 0.5, B = 5: 5 + N(0, 2.5²), the draw of the same seed.
    draw = np.random.default_rng(1).normal(0.0, 1.0)
    expected = max(0.0, 5.0 + 2.5 * draw)
    assert noised_loss(7.0, 5.0, 0.5, np.random.default_rng(1)) == pytest.approx(expected)
    # Many draws of a loss inside the bound: mean F, std z_F B (B = 100 keeps them > 0).
    rng = np.random.default_rng(2)
    draws = np.array([noised_loss(50.0, 100.0, 0.1, rng) for _ in range(20_000)])
    assert draws.mean() == pytest.approx(50.0, abs=0.3)
    assert draws.std() == pytest.approx(10.0, rel=0.03)


def test_round_noise_multiplier_by_hand():
    # (3^-2 + 4^-2)^(-1/2) = (25/144)^(-1/2) = 12/5.
    assert round_noise_multiplier(3.0, 4.0) == pytest.approx(2.4)
    assert round_noise_multiplier(1.0, 1.0) == pytest.approx(1 / math.sqrt(2))
    assert round_noise_multiplier(0.7, 0.0) == 0.7  # no loss release
    assert round_noise_multiplier(math.inf, 4.0) == 4.0  # no model release


def test_client_step_replaces_the_loss_before_every_other_step():
    config = ConfigRecord({"dp-loss-noise-multiplier": 0.5, "dp-loss-bound": 5.0})
    round_ = SimpleNamespace(config=config, loss_before=7.0)
    assert private_loss_before(round_, np.random.default_rng(1)) == {}
    draw = np.random.default_rng(1).normal(0.0, 1.0)
    assert round_.loss_before == pytest.approx(max(0.0, 5.0 + 2.5 * draw))
    # Registered, switched on by the key's presence, first of the "before" steps.
    before = [step.key for step in CLIENT_STEPS.active(ConfigRecord({
        "dp-loss-noise-multiplier": 0.5, "dp-loss-bound": 5.0, "want-accuracy": True,
    })) if step.phase == "before"]  # fmt: skip
    assert before == ["dp-loss-noise-multiplier", "want-accuracy"]
    assert not CLIENT_STEPS["dp-loss-noise-multiplier"].switched_on(ConfigRecord({}))


def test_server_sends_the_keys_and_accounts_model_and_losses_as_one_gaussian():
    strategy = TERM(alpha=LN3)
    settings = PrivacySettings(
        dp="central-fixed",
        dp_clipping_norm=6.0,
        dp_noise_multiplier=0.5,
        dp_loss_noise_multiplier=4.0,
        dp_loss_bound=3.0,
    )
    attach_privacy(strategy, settings, sampling_rate=1.0, seed=7)
    sent = configure(strategy, [1, 2, 3])[0].content["config"]
    assert sent["dp-loss-noise-multiplier"] == 4.0
    assert sent["dp-loss-bound"] == 3.0
    _, metrics = aggregate_round(strategy, three_replies())
    diagnostics = strategy.train_records[1].diagnostics
    # z_round = (0.5^-2 + 4^-2)^(-1/2) = (4 + 1/16)^(-1/2).
    z_round = (4 + 1 / 16) ** -0.5
    assert diagnostics["dp-noise-multiplier-round"] == pytest.approx(z_round)
    assert diagnostics["dp-loss-noise-multiplier"] == 4.0
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_of([(1.0, z_round)], 1e-5))
    assert strategy.privacy.summary()["loss_noise_multiplier"] == 4.0
    # A round whose model is not kept still released the losses: z_F alone.
    assert strategy.privacy.discard()["dp-epsilon"] == pytest.approx(
        epsilon_of([(1.0, z_round), (1.0, 4.0)], 1e-5)
    )


def test_loss_noise_without_dp_or_out_of_range_is_refused():
    with pytest.raises(ValueError, match="run config dp-loss-noise-multiplier > 0 needs dp"):
        RunSettings.from_run_config({"dp-loss-noise-multiplier": 1.0})
    with pytest.raises(ValueError, match=r"run config dp-loss-bound must be > 0, got 0\.0"):
        RunSettings.from_run_config({"dp": "central-fixed", "dp-loss-bound": 0.0})
    with pytest.raises(ValueError, match="run config dp-loss-noise-multiplier must be"):
        RunSettings.from_run_config({"dp": "central-fixed", "dp-loss-noise-multiplier": -1.0})


@pytest.mark.integration
def test_inprocess_run_clips_the_losses_the_rule_reads(tmp_path):
    from fairfl.simulation import run_inprocess

    # B = 0.01 with a tiny noise: TERM's tilted loss reads losses near 0.01, not digits'
    # untrained cross-entropy (~2.3).
    config = {
        "num-partitions": 3,
        "num-server-rounds": 2,
        "strategy": "term",
        "dp": "central-fixed",
        "dp-loss-noise-multiplier": 1e-3,
        "dp-loss-bound": 0.01,
        "out-dir": str(tmp_path),
    }
    run_inprocess(config)
    rounds = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    for record in rounds:
        diagnostics = record["train"]["diagnostics"]
        assert diagnostics["term-tilted-loss"] < 0.011
    z_round = round_noise_multiplier(1.0, 1e-3)
    assert rounds[-1]["train"]["diagnostics"]["dp-epsilon"] == pytest.approx(
        epsilon_of([(1.0, z_round)] * 2, 1e-5)
    )
