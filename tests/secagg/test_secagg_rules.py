"""fairfl's rules under ``secure-aggregation = "secagg+"``, through the in-process runner.

Each run trains the same clients from the same seed with and without secure aggregation,
so the clients' updates are the same and the two global models differ only by the
quantisation of the secure sum. The documented bound on one coordinate of one round's
aggregate (fairfl.secagg.protocol.quantisation_bound, docs/site/howto/aggregate-securely.md)
is ``n (2C + U) / Σ_k round(Q a_k / a_max)``, U <= C, computed here from C and the
unmasked weight sum the round recorded (``secagg-weight-total``, the server's only view
of the weights), times the rule's step scale (1: every rule here has weights summing
to 1 or, for q-FFL, takes the quotient of the sums itself).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message

from fairfl.secagg.client import HELD
from fairfl.secagg.protocol import RECORD, Stage
from fairfl.server.checkpoint import load_checkpoint
from fairfl.server.preflight import check_run
from fairfl.simulation import run_inprocess
from fairfl.strategies.core.base import FairStrategy
from fairfl.strategies.fedopt import FedOptRule
from fairfl.strategies.registry import STRATEGIES
from fairfl.strategies.secure import (
    SecureAggregationRefusedError,
    SecureRounds,
    secure_form_of,
)

C = 8.0  # secagg-clipping-range's default
Q = 4194304  # secagg-quantization-range's default
SEMIVRED_BETA = 0.2  # semivred-beta's default
FEDFA_BETA = 0.5  # fedfa-beta's default
FAIRFED_BETA = 1.0  # fairfed-beta's default
I_MAX = -math.log2(1e-6)  # FedFa's largest I^acc_k (its F2)
BASE = {"num-partitions": 5, "num-server-rounds": 1, "local-epochs": 1, "seed": 3}
ADULT = {"dataset": "adult-synthetic", "model": "logreg", "dirichlet-alpha": 0.5}
RULES = {
    "fedavg": {},
    "qffl": {},
    "term": {},
    "afl": {},
    "fairfed": ADULT,
}


def _config(tmp_path: Path, name: str, **extra) -> dict:
    return {**BASE, "out-dir": str(tmp_path / name), **extra}


def _largest_gap(a, b) -> float:
    return max(
        float(np.abs(x.numpy() - y.numpy()).max())
        for x, y in zip(a.values(), b.values(), strict=True)
    )


def _float32_slack(arrays) -> float:
    """Two float32 roundings of the same float64 value differ by at most one spacing."""
    return max(float(np.spacing(np.abs(a.numpy()).max())) for a in arrays.values())


#: The server's defences change n_k and F_k before the rule reads them; it sends the
#: values it read, so the clients' weights are the rule's (a median clip of the counts,
#: a MAD clip of the losses).
DEFENDED = {
    "fedavg-num-examples-clip": {"strategy": "fedavg", "num-examples-clip": 1.0},
    "term-loss-clip-mad": {"strategy": "term", "loss-clip-mad": 0.5},
}
#: Every registered rule that runs under SecAgg+ (its declared form), FairFed on Adult.
SUPPORTING = sorted(
    name
    for name, spec in STRATEGIES.items()
    if (form := secure_form_of(spec.strategy)) is not None and form.supported
)
#: The rules whose losses stay on the clients: secure sums of scalars come first.
TWO_ROUNDS = {
    name for name in SUPPORTING if secure_form_of(STRATEGIES[name].strategy).kind == "two-rounds"
}
#: The train metric each keeps: Semi-VRed's F_k(w^t), FedFa's Acc_k, FairFed's counts.
HIDDEN = {
    "semivred": "loss-before-training",
    "fedfa": "acc-after-training",
    "fairfed": "group-counts",
}
#: Secure sums per round: Semi-VRed's f̄ and A, then its weighted sum (FedFa's Σ Acc and
#: Σ I, FairFed's summed counts with Σ ω and its mean gap, likewise).
SUMS = {"semivred": 3, "fedfa": 3, "fairfed": 3}
CASES = {
    **{rule: {"strategy": rule, **RULES.get(rule, {})} for rule in SUPPORTING},
    "ditto+qffl": {"strategy": "ditto+qffl"},  # a pairing takes its global rule's form
    **DEFENDED,
}


def test_the_five_rules_of_the_issue_are_supported():
    assert set(RULES) <= set(SUPPORTING)


def test_the_two_round_forms_keep_their_scalars_on_the_clients():
    assert TWO_ROUNDS == set(SUMS) == {"semivred", "fedfa", "fairfed"}


def _averages_stepped_from(monkeypatch) -> list[list[np.ndarray]]:
    """The averages FedAdam's and FedYogi's server optimiser steps from, as it is called."""
    seen: list[list[np.ndarray]] = []
    original = FedOptRule.step_from_average

    def spy(self, server_round, global_arrays, average):
        seen.append([np.asarray(a, dtype=np.float64).copy() for a in average])
        return original(self, server_round, global_arrays, average)

    monkeypatch.setattr(FedOptRule, "step_from_average", spy)
    return seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_secure_model_equals_the_clear_one_within_the_quantisation_bound(
    tmp_path, case, monkeypatch
):
    config = CASES[case]
    averages = _averages_stepped_from(monkeypatch)
    clear = run_inprocess(_config(tmp_path, "clear", **config))
    secure = run_inprocess(
        _config(tmp_path, "secure", **config, **{"secure-aggregation": "secagg+"})
    )
    diagnostics = secure.strategy.train_records[1].diagnostics
    n, weight_total = diagnostics["secagg-clients"], diagnostics["secagg-weight-total"]
    assert n == 5 and weight_total > 0
    bound = n * (2 * C + C) / weight_total
    # A two-round form's statistics come from sums of scalars [s_k x_k] (every weight a_max,
    # so Σ r̂_k = n Q), each within e = n 3C / Q of Σ s_k x_k.
    e = n * 3 * C / Q
    if case == "semivred":
        # f̄ and A are those sums over Σ σ n_k >= 1 (the largest client's share): within e.
        # The weights p_k (1 + 2β((F_k - f̄)_+ - A)) then move by at most ε = 2β (2e + e)
        # in l1, the normalised ones by 2ε / (1 - ε), each times |Δ| <= C.
        eps = 2 * SEMIVRED_BETA * 3 * e
        bound += 2 * eps * C / (1 - eps)
        assert 0 < diagnostics["secagg-bound"] <= bound
        clear_a = 1 / (2 * clear.strategy.train_records[1].diagnostics["beta-max"])
        assert 1 / (2 * diagnostics["beta-max"]) == pytest.approx(clear_a, abs=2 * e)
    elif case == "fedfa":
        # S = Σ Acc_k within e, so each -log2(Acc_k / S + 1e-6) within d = log2(S / (S - e));
        # S_I = Σ I_k within e I_max (masked as I_k / I_max). The accuracy shares I_k / S_I
        # move by at most (2 n d + e I_max) / S_I in l1, the weights by (1 - β) times that.
        total, information = (
            diagnostics[k] for k in ("secagg-accuracy-total", "secagg-information-total")
        )
        assert 0 < total <= n and information > 0
        d = math.log2(total / (total - e))
        eps = (1 - FEDFA_BETA) * (2 * n * d + e * I_MAX) / information
        bound += 2 * eps * C / (1 - eps)
        assert 0 < diagnostics["secagg-bound"] <= bound * (1 + 1e-12)
    elif case == "fairfed":
        # The summed counts are exact integers: F_global is the clear run's, bit for bit.
        clear_diagnostics = clear.strategy.train_records[1].diagnostics
        assert diagnostics["fairfed-global-metric"] == clear_diagnostics["fairfed-global-metric"]
        # Σ ω^0 = 1 from [s ω_k^0] (s = 1 / (2 (1 + β)) = 1/4): within e_S = 4e; mean Δ from
        # [Δ_k / 2]: within e_Δ = 2e / n. The weights ω^0 / Ŝ - β (Δ_k - mean Δ) move by
        # ε = e_S / Ŝ + n β e_Δ <= 4e / (1 - 4e) + 2βe in l1; the clear ones sum to >= 1.
        e_mean = 2 * e / n
        assert diagnostics["fairfed-delta-mean"] == pytest.approx(
            clear_diagnostics["fairfed-delta-mean"], abs=e_mean
        )
        eps = 4 * e / (1 - 4 * e) + n * FAIRFED_BETA * e_mean
        bound += 2 * eps * C / (1 - eps)
        assert 0 < diagnostics["secagg-bound"] <= bound * (1 + 1e-12)
        # Each client holds ω̄_k (FF6 before normalising): normalised, the clear run's ω_k.
        held = load_checkpoint(tmp_path / "secure" / "checkpoint.npz").client_state
        omega = {str(k): c.config_records[HELD]["fairfed-weight"] for k, c in held.items()}
        assert secure.strategy.fair_weights == {}  # the server holds none
        total = sum(omega.values())
        for key, weight in clear.strategy.fair_weights.items():
            assert omega[key] / total == pytest.approx(weight, abs=2 * eps)
    else:
        assert diagnostics["secagg-bound"] == pytest.approx(bound)
    slack = _float32_slack(clear.arrays)
    if isinstance(secure.strategy, FedOptRule):
        # The bound is on the average; the server optimiser then steps from it, the same
        # function of (w^t, average) in both runs (its slope, up to η (1 - β_1) / τ, is
        # not the secure sum's to bound). FedFa's momentum step is linear with slope
        # 1 - η (1 - γ) <= 1 on the first round: its model is checked below.
        (clear_average, secure_average) = averages
        pairs = zip(clear_average, secure_average, strict=True)
        gap = max(float(np.abs(a - b).max()) for a, b in pairs)
        assert 0 < gap <= bound + slack
        return
    assert _largest_gap(clear.arrays, secure.arrays) <= bound + slack
    if case == "rcfl":  # η^{t+1} = Σ W_j η_j from the clear η_j: the clear run's
        assert secure.strategy.eta == pytest.approx(clear.strategy.eta, rel=1e-12)
        assert secure.strategy.eta != secure.strategy.params.eta_init
    # The secure run's round is the clear one's: same clients, no drop.
    assert secure.strategy.train_records[1].accepted == clear.strategy.train_records[1].accepted


@pytest.mark.parametrize("rule", SUPPORTING)
def test_no_individual_update_reaches_the_strategy(tmp_path, rule, monkeypatch):
    """Every reply the server gets, and everything the rule's code is handed, has no arrays."""
    wire: list[Message] = []  # every reply to a secure-aggregation message, as it arrives
    handed: list[object] = []  # every argument fairfl's strategy code is called with

    def record_wire(instruction: Message, reply: Message) -> Message:
        if RECORD in instruction.content.config_records:
            wire.append(reply)
        return reply

    def spy(cls, name):
        original = getattr(cls, name)

        def wrapped(self, *args, **kwargs):
            handed.extend(args)
            handed.extend(kwargs.values())
            return original(self, *args, **kwargs)

        return wrapped

    for name in ("read_train_replies", "sampled_replies", "value_errors"):
        monkeypatch.setattr(FairStrategy, name, spy(FairStrategy, name))
    monkeypatch.setattr(SecureRounds, "aggregate_train", spy(SecureRounds, "aggregate_train"))
    aggregated = []
    built = check_run({"strategy": rule, "out-dir": str(tmp_path / "x")}, local_clients=False)
    for cls in type(built.strategy).__mro__:
        # Only where a class defines it: a new entry lower down would void the rule's form.
        if "aggregate" in cls.__dict__:
            monkeypatch.setattr(cls, "aggregate", lambda self, *a: aggregated.append(a))
    config = _config(
        tmp_path,
        "secure",
        strategy=rule,
        **RULES.get(rule, {}),
        **{"secure-aggregation": "secagg+"},
    )
    outcome = run_inprocess(config, reply_filter=record_wire)

    assert aggregated == []  # the clear path, which reads each update, never ran
    stages = [m.content.config_records[RECORD] for m in wire if RECORD in m.content.config_records]
    # Only masked vectors came in: one per client and secure sum.
    assert sum("masked_params" in s for s in stages) == 5 * SUMS.get(rule, 1)
    for reply in wire:
        assert all(len(record) == 0 for record in reply.content.array_records.values())
        for metrics in reply.content.metric_records.values():
            assert "qffl-h" not in metrics  # h_k holds ‖w^t - w_k‖²: masked, never clear
            if rule in TWO_ROUNDS:  # F_k(w^t), Acc_k, counts: they enter only masked sums
                assert HIDDEN[rule] not in metrics
        for record in reply.content.config_records.values():
            assert "fairfed-weight" not in record  # FairFed's ω_k never leaves its client
    messages = [x for x in _flatten(handed) if isinstance(x, Message)]
    replies = [x for x in _flatten(handed) if hasattr(x, "arrays") and hasattr(x, "node_id")]
    assert len(messages) >= 5 and len(replies) >= 5
    for message in messages:
        assert all(len(record) == 0 for record in message.content.array_records.values())
    for reply in replies:
        assert reply.arrays == []
        if rule in TWO_ROUNDS:
            assert HIDDEN[rule] not in reply.metrics
    if rule == "fairfed":  # the clients hold ω_k; the server's state has none
        assert outcome.strategy.state_dict() == {"weights": {}}


def _flatten(values):
    for value in values:
        if isinstance(value, list | tuple):
            yield from _flatten(value)
        else:
            yield value


def _silent_at(stage: str, nodes: set[int], rounds: set[int], sums: set[int] | None = None):
    """``nodes`` (node ids) go silent at ``stage`` in ``rounds`` (train-config server-round).

    ``sums``: only in these secure sums of the round (1 the first; a two-round form's
    later sums start with a setup that only draws fresh keys); ``None``: in every sum.
    """
    state = {"round": 0, "sum": 0, "stage": ""}

    def reply_filter(instruction: Message, reply: Message) -> Message | None:
        record = instruction.content.config_records.get(RECORD)
        if record is None:
            return reply
        if record["stage"] == Stage.SETUP and state["stage"] != Stage.SETUP:  # a new sum
            config = instruction.content.config_records.get("config")
            if config is not None:  # a train setup: the round's first sum
                state["round"], state["sum"] = int(config["server-round"]), 1
            else:
                state["sum"] += 1
        state["stage"] = str(record["stage"])
        node = instruction.metadata.dst_node_id
        in_sum = sums is None or state["sum"] in sums
        if record["stage"] == stage and node in nodes and state["round"] in rounds and in_sum:
            return None
        return reply

    return reply_filter


SHARES = {"secagg-num-shares": 5, "secagg-reconstruction-threshold": 3}


def test_drops_within_the_threshold_give_the_clear_round_of_the_survivors(tmp_path):
    # Two of five clients (node ids 1004, 1005) go silent after sharing their keys; the
    # clear run of the same round without them is FedAvg over the three others.
    gone = {1004, 1005}
    secure = run_inprocess(
        _config(tmp_path, "secure", **SHARES, **{"secure-aggregation": "secagg+"}),
        reply_filter=_silent_at(Stage.COLLECT_MASKED_VECTORS, gone, {1}),
    )
    clear = run_inprocess(
        _config(tmp_path, "clear"),
        reply_filter=lambda i, r: (
            None if i.metadata.dst_node_id in gone and i.metadata.message_type == "train" else r
        ),
    )
    record = secure.strategy.train_records[1]
    assert record.accepted == [1001, 1002, 1003]
    assert set(record.dropped) == gone
    diagnostics = record.diagnostics
    bound = diagnostics["secagg-clients"] * 3 * C / diagnostics["secagg-weight-total"]
    assert diagnostics["secagg-clients"] == 3
    assert _largest_gap(clear.arrays, secure.arrays) <= bound + _float32_slack(clear.arrays)


def test_semivred_drops_in_its_first_sum_give_the_clear_round_of_the_survivors(tmp_path):
    # 1004 and 1005 go silent at the collect stage of the first sum (of σ n_k F_k): f̄, A
    # and the weighted sum are then the three survivors', as in their clear round.
    gone = {1004, 1005}
    semi = {"strategy": "semivred", **SHARES}
    secure = run_inprocess(
        _config(tmp_path, "secure", **semi, **{"secure-aggregation": "secagg+"}),
        reply_filter=_silent_at(Stage.COLLECT_MASKED_VECTORS, gone, {1}),
    )
    clear = run_inprocess(
        _config(tmp_path, "clear", strategy="semivred"),
        reply_filter=lambda i, r: (
            None if i.metadata.dst_node_id in gone and i.metadata.message_type == "train" else r
        ),
    )
    record = secure.strategy.train_records[1]
    assert record.accepted == [1001, 1002, 1003] and set(record.dropped) == gone
    assert record.diagnostics["secagg-clients"] == 3
    clear_a = 1 / (2 * clear.strategy.train_records[1].diagnostics["beta-max"])
    e = 3 * 3 * C / Q  # each statistic's error with 3 clients (see the equality test)
    assert record.diagnostics["secagg-excess"] == pytest.approx(clear_a, abs=2 * e)
    bound = record.diagnostics["secagg-bound"]
    assert _largest_gap(clear.arrays, secure.arrays) <= bound + _float32_slack(clear.arrays)


def test_drops_beyond_the_threshold_skip_the_round_and_the_run_goes_on(tmp_path):
    # Three of five silent at the collect stage of round 1: each client keeps 2 live
    # neighbours, below the threshold 3. Round 1 keeps the initial model (skipped, not
    # failed: the run completes), round 2 trains.
    out = tmp_path / "secure"
    config = _config(tmp_path, "secure", **SHARES, **{"secure-aggregation": "secagg+"})
    outcome = run_inprocess(
        {**config, "num-server-rounds": 2},
        reply_filter=_silent_at(Stage.COLLECT_MASKED_VECTORS, {1003, 1004, 1005}, {1}),
    )
    first, second = outcome.strategy.train_records[1], outcome.strategy.train_records[2]
    assert first.skipped is not None and "reconstruction threshold 3" in first.skipped
    assert {1003, 1004, 1005} <= set(first.dropped)
    assert second.skipped is None and second.diagnostics["secagg-clients"] == 5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert "reconstruction threshold 3" in summary["skipped_rounds"]["1"]
    assert summary["config"]["secure-aggregation"] == "secagg+"


@pytest.mark.parametrize("rule", ["fedmgda", "fedfv", "equitable"])
def test_rules_that_read_each_update_are_refused_at_start(tmp_path, rule):
    config = {"strategy": rule, "secure-aggregation": "secagg+", "out-dir": str(tmp_path)}
    with pytest.raises(SecureAggregationRefusedError, match=f"strategy {rule} cannot run"):
        check_run(config, local_clients=False)


@pytest.mark.parametrize(("key", "value"), [("loss-clip-mad", 0.5), ("max-client-share", 0.5)])
def test_semivred_refuses_settings_that_need_each_loss_or_weight(tmp_path, key, value):
    config = {"strategy": "semivred", "secure-aggregation": "secagg+", key: value}
    with pytest.raises(SecureAggregationRefusedError, match=f"run config {key}"):
        check_run({**config, "out-dir": str(tmp_path)}, local_clients=False)


def test_fedmgda_under_secagg_exits_2_with_one_line(tmp_path, capsys):
    from fairfl.cli import main

    code = main(
        ["run", "-c", "strategy=fedmgda", "secure-aggregation=secagg+", f"out-dir={tmp_path}"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "fedmgda" in err[0] and "Gram matrix" in err[0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("secure-aggregation", "secagg"),
        ("secagg-num-shares", 2),
        ("secagg-reconstruction-threshold", 0),
        ("secagg-clipping-range", -1.0),
        ("secagg-quantization-range", 1),
        ("secagg-max-weight", math.inf),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(tmp_path, key, value):
    with pytest.raises(ValueError, match=f"run config {key} "):
        check_run({key: value, "out-dir": str(tmp_path)}, local_clients=False)


def test_fairfl_compare_takes_the_key(tmp_path):
    from fairfl.cli import main

    out = tmp_path / "cmp"
    code = main(
        [
            "compare",
            "--rules",
            "fedavg",
            "term",
            "--seeds",
            "0",
            "--set",
            "secure-aggregation=secagg+",
            "num-partitions=3",
            "num-server-rounds=1",
            "local-epochs=1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    for rule in ("fedavg", "term"):
        run = out / "runs" / rule / "seed-0"
        assert json.loads((run / "summary.json").read_text())["config"]["secure-aggregation"] == (
            "secagg+"
        )
        (line,) = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
        assert line["train"]["diagnostics"]["secagg-clients"] == 3


def test_a_client_error_at_a_stage_is_recorded_as_its_drop(tmp_path):
    # Node 1005's ClientApp fails at the collect stage: its vector is not in the sum, its
    # record names the stage and the error, and the round completes over the other four.
    from flwr.app import Error

    def failing(instruction: Message, reply: Message) -> Message:
        record = instruction.content.config_records.get(RECORD)
        node = instruction.metadata.dst_node_id
        if record is not None and record["stage"] == Stage.COLLECT_MASKED_VECTORS and node == 1005:
            return Message(
                Error(code=0, reason="Traceback ...\nValueError: boom"), reply_to=instruction
            )
        return reply

    outcome = run_inprocess(
        _config(tmp_path, "secure", **SHARES, **{"secure-aggregation": "secagg+"}),
        reply_filter=failing,
    )
    record = outcome.strategy.train_records[1]
    assert record.accepted == [1001, 1002, 1003, 1004]
    assert record.dropped[1005] == (
        "secure aggregation: lost at stage collect_masked_vectors (error: ValueError: boom)"
    )
    assert 1005 not in record.unanswered and record.skipped is None


def test_all_zero_weights_stop_the_run_naming_them(tmp_path, monkeypatch):
    # Nothing scales λ = 0 to a_max, and the sum would divide by 0: the run stops, naming
    # the weights (negative ones are masked with their sign: test_secagg_signed.py).
    from flwr.serverapp.exception import AggregationError

    from fairfl.strategies.core.reweighted import LossRule

    monkeypatch.setattr(LossRule, "lambdas", lambda self, r, replies: np.zeros(3))
    config = _config(tmp_path, "secure", strategy="vred", **{"num-partitions": 3})
    with pytest.raises(AggregationError, match=r"weights \[0\. 0\. 0\.\] are all 0"):
        run_inprocess({**config, "secure-aggregation": "secagg+"})
