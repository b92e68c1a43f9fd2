"""Distributed DP (``dp = "distributed"``): the clients noise what SecAgg+ masks.

Hand numbers (fairfl.privacy.distributed, eqs. (1) and (2)): with m clients given a
part, dropout tolerance ρ and t = ceil((1 - ρ) m), each client adds N(0, σ_c²) with
σ_c = z C r̂_max / √t to every value of r̂_k u_k; n survivors leave variance n σ_c² in
the unmasked sum V = Σ_k r̂_k u_k, and the round is accounted at
z_eff = z √(min(n, t) / t) r̂_max / r̂_max,summed.
"""

from __future__ import annotations

import itertools
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from fairfl._compat import server_task_identity
from fairfl.privacy.distributed import (
    client_noise_std,
    distributed_noise_multiplier,
    expected_survivors,
)
from fairfl.secagg import client as secagg_client
from fairfl.secagg.config import SecAggSettings
from fairfl.secagg.noise import DP_CLIPPING_NORM, DP_NOISE_STD, clip_to_norm
from fairfl.secagg.protocol import Stage
from fairfl.secagg.server import SecAggPlusDriver
from fairfl.server.preflight import check_run
from fairfl.settings import RunSettings
from fairfl.simulation import run_inprocess
from fairfl.simulation.inprocess import InMemoryGrid
from tests.secagg.test_secagg_rules import _silent_at

Q = 4194304  # secagg-quantization-range's default
MAX_WEIGHT = 1000.0  # secagg-max-weight's default
D = 20000  # coordinates of the model in the variance test
NODES = (1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("admitted", "tolerance", "expected"),
    [(5, 0.0, 5), (5, 0.4, 3), (10, 0.1, 9), (4, 0.25, 3), (1, 0.9, 1), (3, 0.5, 2)],
)
def test_expected_survivors_is_the_ceiling_of_the_kept_share(admitted, tolerance, expected):
    assert expected_survivors(admitted, tolerance) == expected


def test_client_noise_and_effective_multiplier_by_hand():
    # z = 2, C = 0.5, r̂_max = 0.8, t = 4: σ_c = 2 · 0.5 · 0.8 / 2 = 0.4.
    assert client_noise_std(2.0, 0.5, 0.8, 4) == pytest.approx(0.4, rel=1e-15)
    # 4 of 4 survive, the heaviest among them: z itself.
    assert distributed_noise_multiplier(2.0, 4, 4, 0.8, 0.8) == 2.0
    # 1 of 4: √(1/4) = 1/2 of the noise's standard deviation.
    assert distributed_noise_multiplier(2.0, 4, 1, 0.8, 0.8) == pytest.approx(1.0, rel=1e-15)
    # More than t survive: only t clients' noise counts.
    assert distributed_noise_multiplier(2.0, 4, 6, 0.8, 0.8) == 2.0
    # The heaviest dropped: the sum's sensitivity is 0.4 C, twice the multiplier.
    assert distributed_noise_multiplier(2.0, 4, 4, 0.8, 0.4) == pytest.approx(4.0, rel=1e-15)


def test_the_client_clips_its_update_to_the_norm_only_when_asked():
    update = [np.array([3.0, 0.0]), np.array([[4.0]])]  # ‖Δ‖ = 5
    clipped = clip_to_norm({DP_CLIPPING_NORM: 1.0}, update)
    assert np.allclose(clipped[0], [0.6, 0.0]) and np.allclose(clipped[1], [[0.8]])
    assert np.array_equal(clip_to_norm({}, update)[0], update[0])
    inside = clip_to_norm({DP_CLIPPING_NORM: 10.0}, update)
    assert np.array_equal(inside[1], update[1])


# ------------------------------------------------------------ the unmasked sum's noise
def _train(message: Message, context) -> Message:
    """Node k: w^t + 0.01 k on every value (‖Δ_k‖ = 0.01 k √D > C = 1: clipped)."""
    k = context.node_id
    arrays = message.content.array_records["arrays"]
    trained = {key: Array(arrays[key].numpy() + np.float32(0.01 * k)) for key in arrays}
    metrics = {"num-examples": 10 * k}
    content = RecordDict({"arrays": ArrayRecord(trained), "metrics": MetricRecord(metrics)})
    return Message(content, reply_to=message)


def test_the_unmasked_sum_carries_the_documented_noise_variance(monkeypatch):
    # FedAvg's part: a_k = σ n_k with σ = a_max / 50 (the largest n_k = 50 at a_max), so
    # r_k = k / 5, r̂_k = round(Q k / 5) / Q. Each clipped Δ_k is 1/√D on every value, so
    # the noiseless V is Σ r̂_k / √D per coordinate. With z = 1, C = 1, r̂_max = 1 and
    # t = n = 5, each client adds σ_c = 1/√5 and the sum's noise has variance
    # 5 σ_c² = (z C r̂_max)² = 1.
    seeds = itertools.count(49)
    monkeypatch.setattr(secagg_client, "secret_rng", lambda: np.random.default_rng(next(seeds)))
    std = client_noise_std(1.0, 1.0, 1.0, expected_survivors(5, 0.0))
    assert std == pytest.approx(1 / math.sqrt(5), rel=1e-15)

    def parts(replies):
        return {
            int(r.metadata.src_node_id): {
                "weight-kind": "num-examples",
                "weight-scale": MAX_WEIGHT / 50,
                "num-examples": int(r.content.metric_records["metrics"]["num-examples"]),
                DP_CLIPPING_NORM: 1.0,
                DP_NOISE_STD: std,
            }
            for r in replies
        }

    app = ClientApp(mods=[secagg_client.secaggplus_mod])
    app.train()(_train)
    grid = InMemoryGrid(app, {k: {} for k in NODES}, {})
    settings = SecAggSettings(
        secure_aggregation="secagg+",
        secagg_num_shares=5,
        secagg_reconstruction_threshold=3,
        secagg_clipping_range=8.0,  # >= C (1 + 6 z) = 7
    )
    with server_task_identity(1):
        content = RecordDict(
            {
                "arrays": ArrayRecord({"w": Array(np.zeros(D, np.float32))}),
                "config": ConfigRecord({"server-round": 1}),
            }
        )
        messages = [
            Message(content, dst_node_id=k, message_type=MessageType.TRAIN, group_id="1")
            for k in NODES
        ]
        result = SecAggPlusDriver(settings).run(grid, messages, parts, arrays_key="arrays")
    assert result.skipped is None and result.num_clients == 5
    ratios = [round(Q * k / 5) / Q for k in NODES]
    assert result.weight_total == sum(round(Q * k / 5) for k in NODES)
    total = result.weight_total / Q  # Σ r̂_k: the mean times it is V
    noise = result.mean[0] * total - sum(ratios) / math.sqrt(D)
    # For N iid N(0, σ²) values the sample variance s² has mean σ² and, as
    # (N - 1) s² / σ² ~ χ²(N - 1), standard deviation σ² √(2 / (N - 1)) (0.01 here); the
    # sample mean has standard deviation σ / √N. Five standard deviations either way (the
    # seed is fixed; a correct mechanism fails this with probability below 1e-6). The
    # quantisation adds variance below n (2 C_s / Q)² / 4 ~ 2e-11, far inside.
    variance, expected = float(np.var(noise, ddof=1)), 5 * std**2
    assert abs(variance / expected - 1) < 5 * math.sqrt(2 / (D - 1))
    assert abs(float(noise.mean())) < 5 * math.sqrt(expected / D)


# ------------------------------------------------------------- through the runner
SHARES = {"secagg-num-shares": 5, "secagg-reconstruction-threshold": 3}
BASE = {
    "num-partitions": 5,
    "local-epochs": 1,
    "seed": 3,
    "secure-aggregation": "secagg+",
    "dp": "distributed",
    **SHARES,
}


def _accountant_epsilon(multipliers: list[float], delta: float) -> float:
    accountant = RdpAccountant()
    for z in multipliers:
        accountant.compose(dp_accounting.GaussianDpEvent(z))
    return float(accountant.get_epsilon(delta))


def test_a_run_with_fewer_survivors_records_the_lower_multiplier(tmp_path):
    # 1004 and 1005 go silent after sharing their keys: 3 of the 5 the noise was sized
    # for (ρ = 0) reach the sum. z = 1.5.
    outcome = run_inprocess(
        {
            **BASE,
            "num-server-rounds": 1,
            "dp-noise-multiplier": 1.5,
            "secagg-clipping-range": 11.0,  # >= C (1 + 6 z) = 10
            "out-dir": str(tmp_path / "run"),
        },
        reply_filter=_silent_at(Stage.COLLECT_MASKED_VECTORS, {1004, 1005}, {1}),
    )
    diagnostics = outcome.strategy.train_records[1].diagnostics
    assert (diagnostics["dp-expected-survivors"], diagnostics["dp-survivors"]) == (5, 3)
    # σ_c = z C r̂_max / √t over the five parts sent.
    assert diagnostics["dp-noise-std"] == pytest.approx(
        1.5 * diagnostics["dp-weight-ratio-max"] / math.sqrt(5), rel=1e-12
    )
    # eq. (2): 1.5 √(3/5), times r̂_max over r̂_max of the three summed.
    ratio = diagnostics["dp-weight-ratio-max"] / diagnostics["dp-weight-ratio-max-summed"]
    z_eff = diagnostics["dp-noise-multiplier-effective"]
    assert z_eff == pytest.approx(1.5 * math.sqrt(3 / 5) * ratio, rel=1e-12)
    assert z_eff < 1.5 and diagnostics["dp-weights-exceed-noise"] == 1
    assert diagnostics["dp-epsilon"] == pytest.approx(_accountant_epsilon([z_eff], 1e-5), rel=1e-9)


def test_drops_within_the_tolerance_keep_the_full_multiplier_and_epsilon_composes(tmp_path):
    # ρ = 0.4: t = ceil(0.6 · 5) = 3. Round 1: 1004 and 1005 go silent after sharing their
    # keys, three survivors carry the full noise; round 2 sums all five, of which t count.
    outcome = run_inprocess(
        {
            **BASE,
            "num-server-rounds": 2,
            "strategy": "term",
            "dp-dropout-tolerance": 0.4,
            "out-dir": str(tmp_path / "run"),
        },
        reply_filter=_silent_at(Stage.COLLECT_MASKED_VECTORS, {1004, 1005}, {1}),
    )
    first, second = (outcome.strategy.train_records[r] for r in (1, 2))
    assert first.accepted == [1001, 1002, 1003]
    recorded = []
    for record, survivors in ((first, 3), (second, 5)):
        diagnostics = record.diagnostics
        assert (diagnostics["dp-expected-survivors"], diagnostics["dp-survivors"]) == (
            3,
            survivors,
        )
        ratio = diagnostics["dp-weight-ratio-max"] / diagnostics["dp-weight-ratio-max-summed"]
        z_eff = diagnostics["dp-noise-multiplier-effective"]
        assert z_eff == pytest.approx(ratio, rel=1e-12) and z_eff >= 1.0
        assert diagnostics["dp-weights-exceed-noise"] == 0
        recorded.append(z_eff)
    # ε after the two rounds: the accountant's for the recorded z_eff (q = 1), δ = 1e-5.
    epsilon = second.diagnostics["dp-epsilon"]
    assert epsilon == pytest.approx(_accountant_epsilon(recorded, 1e-5), rel=1e-9)
    assert epsilon > first.diagnostics["dp-epsilon"]
    summary = outcome.strategy.privacy.summary()
    assert summary["dp"] == "distributed" and summary["sampling_rate"] == 1.0
    assert summary["released_rounds"] == 2 and summary["epsilon"] == epsilon
    assert all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())


# ------------------------------------------------------------- refused at start
@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"dp": "distributed"}, "run config dp='distributed' noises what SecAgg"),
        (
            {"dp": "local", "secure-aggregation": "secagg+"},
            "run config dp and secure-aggregation are both on: dp='local'.*dp='distributed'",
        ),
        (
            {"dp": "distributed", "secure-aggregation": "secagg+", "dp-noise-multiplier": 2.0},
            r"run config secagg-clipping-range \(8\) must be >= .* = 13",
        ),
        (
            {"dp": "distributed", "secure-aggregation": "secagg+", "dp-calibration": "cap"},
            "run config dp-calibration='cap' is refused with dp='distributed'",
        ),
        (
            {"dp": "distributed", "secure-aggregation": "secagg+", "dp-dropout-tolerance": 1.0},
            r"run config dp-dropout-tolerance must be in \[0, 1\), got 1.0",
        ),
    ],
)
def test_a_refused_setting_names_its_key(config, message):
    with pytest.raises(ValueError, match=message):
        RunSettings.from_run_config(config)


@pytest.mark.parametrize("rule", ["qffl", "qfedsgd", "semivred", "fedfa", "fairfed"])
def test_rules_whose_clients_hold_their_weights_are_refused_before_anything_waits(tmp_path, rule):
    config = {
        "strategy": rule,
        "secure-aggregation": "secagg+",
        "dp": "distributed",
        "out-dir": str(tmp_path),
    }
    with pytest.raises(
        ValueError, match=f"dp='distributed' is refused for this rule: strategy {rule}'s"
    ):
        check_run(config, local_clients=False)


def test_distributed_noise_refuses_a_clear_round():
    # Attached through the Python API to a rule whose rounds are not secure, the server's
    # side must not quietly act as central DP (it adds nothing: the clients would).
    from fairfl.privacy.config import PrivacySettings
    from fairfl.strategies.fedavg import FedAvg
    from fairfl.strategies.private import attach_privacy

    strategy = FedAvg()
    attach_privacy(strategy, PrivacySettings(dp="distributed"), sampling_rate=0.5, seed=0)
    assert strategy.privacy is not None and strategy.privacy.sampling_rate == 1.0
    with pytest.raises(ValueError, match="dp='distributed' aggregated a round in the clear"):
        strategy.privacy.release([np.zeros(2)], [1.0], 1)
    with pytest.raises(ValueError, match="needs secure-aggregation='secagg\\+'"):
        strategy.privacy.clip([np.zeros(2)], [[np.ones(2)]])


def test_a_refused_rule_exits_2_with_one_line_naming_it(tmp_path, capsys):
    from fairfl.cli import main

    code = main(
        [
            "run",
            "-c",
            "strategy=qffl",
            "secure-aggregation=secagg+",
            "dp=distributed",
            f"out-dir={tmp_path}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "dp='distributed'" in err[0] and "qffl" in err[0]


@pytest.mark.integration
def test_a_resumed_distributed_run_keeps_its_account(tmp_path):
    # The clients' noise is OS entropy, so the models differ; the account does not: three
    # rounds of five survivors out of five are three rounds at z = 1, crashed in round 3
    # and resumed from round 2's checkpoint or not.
    from fairfl.server.checkpoint import CHECKPOINT_FILE
    from tests.server.test_checkpoint_resume import ServerCrashError

    def crash_in_round_3(instruction: Message, reply: Message) -> Message | None:
        config = instruction.content.config_records.get("config")
        if config is not None and int(config["server-round"]) == 3:
            raise ServerCrashError("killed in round 3")
        return reply

    config = {**BASE, "num-server-rounds": 3, "strategy": "fedavg"}
    whole = run_inprocess({**config, "out-dir": str(tmp_path / "whole")})
    crashed = tmp_path / "crashed"
    with pytest.raises(ServerCrashError):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round_3)
    resume = {"out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)}
    resumed = run_inprocess({**config, **resume})
    expected = _accountant_epsilon([1.0, 1.0, 1.0], 1e-5)
    for outcome in (whole, resumed):
        assert outcome.summary["privacy"]["released_rounds"] == 3
        assert outcome.summary["privacy"]["epsilon"] == pytest.approx(expected, rel=1e-9)
