"""Who a reply speaks for (issue 35 items 1-2): claims, the registration, count bounds."""

from __future__ import annotations

import base64
import hashlib
from unittest.mock import Mock

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.server.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from fairfl.strategies import AFL, RCFL, FedAvg
from fairfl.strategies.core.identity import (
    Claims,
    CountBounds,
    RegistrationError,
    grid_fingerprints,
    key_fingerprint,
    load_registration,
)
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, local
from tests.strategies.test_bad_replies_all_rules import (
    RUN_CONFIG,
    SHAPES,
    honest_arrays,
    honest_metrics,
)


def reply(node: int, partition: int, count: int = 50, loss: float = 1.0, value: float = 0.0):
    metrics = {keys.NUM_EXAMPLES: count, keys.LOSS_BEFORE_TRAINING: loss, keys.RCFL_ETA: 0.5}
    metrics[keys.PARTITION_ID] = partition
    return make_reply(node, local(value), metrics)


HONEST = [(1, 0, 40, 0.5), (2, 1, 50, 1.0), (3, 2, 60, 2.0)]


def honest_round():
    return [reply(n, p, c, f, value=float(n)) for n, p, c, f in HONEST]


@pytest.mark.parametrize("rule", [AFL, RCFL])
def test_an_impostor_without_node_auth_leaves_the_victims_weight_and_state(rule):
    # Round 1: nodes 1-3 claim partitions 0-2. Round 2: node 9 claims partition 1 (node
    # 2's) with 100x its count and a huge loss, first while node 2 is silent, then beside it.
    attacked, clean = rule(), rule()
    for strategy in (attacked, clean):
        aggregate_round(strategy, honest_round(), server_round=1)
    silent = [r for r in honest_round() if r.metadata.src_node_id != 2]
    impostor = reply(9, 1, count=5000, loss=1e5, value=9.0)
    got, _ = aggregate_round(attacked, [*silent, impostor], server_round=2)
    want, _ = aggregate_round(clean, silent, server_round=2)
    record = attacked.train_records[2]
    assert "node 9 claims client key '1'" in record.dropped[9]
    assert "held by node 2" in record.dropped[9]
    assert attacked.state_dict() == clean.state_dict()
    for a, b in zip(got.values(), want.values(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Both reply: the holder keeps its slot (before, both were dropped).
    aggregate_round(attacked, [*honest_round(), impostor], server_round=3)
    aggregate_round(clean, honest_round(), server_round=3)
    assert 2 in attacked.train_records[3].weights and 9 in attacked.train_records[3].dropped
    assert attacked.state_dict() == clean.state_dict()


def test_rcfl_keeps_the_victims_first_count():
    strategy = RCFL()
    aggregate_round(strategy, honest_round(), server_round=1)
    aggregate_round(strategy, [reply(9, 1, count=5000, value=9.0)], server_round=2)
    assert strategy.client_counts["1"] == 50


def test_two_first_claims_in_one_round_are_both_dropped_and_neither_holds_the_key():
    claims = Claims()
    owner, refused = claims.resolve("4", [7, 8])
    assert owner is None and sorted(refused) == [7, 8] and claims.holders == {}
    assert claims.resolve("4", [8]) == (8, {})


def test_a_rotating_id_stops_at_max_clients():
    strategy = AFL()
    strategy.client_keys.claims.max_clients = 5
    # A node configured to serve several partitions (one node holds one by default).
    strategy.client_keys.claims.max_keys_per_node = 10
    for server_round in range(1, 11):
        # Node 9 claims a new partition every round, beside the three honest clients.
        rotating = reply(9, 100 + server_round, loss=1.0, value=9.0)
        aggregate_round(strategy, [*honest_round(), rotating], server_round=server_round)
    held = strategy.client_keys.claims.holders
    assert len(held) == 5 and sorted(held, key=int) == ["0", "1", "2", "101", "102"]
    assert sorted(strategy.state_dict()["lambdas"], key=int) == ["0", "1", "2", "101", "102"]
    assert "max-clients=5" in strategy.train_records[10].dropped[9]


def test_resume_keeps_the_claims_of_connected_nodes(tmp_path):
    strategy = FedAvg()
    aggregate_round(strategy, honest_round(), server_round=1)
    path = tmp_path / "checkpoint.npz"
    arrays = ArrayRecord({"w": Array(np.zeros(2, np.float32))})
    claims = strategy.client_keys.claims.state_dict()
    save_checkpoint(path, Checkpoint(1, arrays, {}, [], [], [], client_claims=claims))
    resumed = FedAvg()
    # Node 3 is gone at the resume: its key is free again; nodes 1 and 2 keep theirs.
    resumed.client_keys.claims.load_state_dict(load_checkpoint(path).client_claims, [1, 2, 9])
    assert resumed.client_keys.claims.holders == {"0": 1, "1": 2}
    aggregate_round(resumed, [reply(9, 1, value=9.0), reply(10, 2, value=1.0)], server_round=2)
    assert "held by node 2" in resumed.train_records[2].dropped[9]
    assert resumed.train_records[2].accepted == [10]


def ec_key() -> tuple[bytes, bytes]:
    """A SuperNode key pair's public halves: PEM (as the SuperLink stores it) and OpenSSH."""
    key = ec.generate_private_key(ec.SECP384R1()).public_key()
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    ssh = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return pem, ssh


def test_the_fingerprint_is_ssh_keygens_of_either_form():
    pem, ssh = ec_key()
    blob = base64.b64decode(ssh.split()[1])
    want = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert key_fingerprint(pem) == key_fingerprint(ssh) == want


def registered(tmp_path, partitions):
    """A registration file for ``partitions`` (partition id per key); the keys' PEMs."""
    pems = {p: ec_key()[0] for p in partitions}
    lines = ["[partitions]"] + [f'"{key_fingerprint(pem)}" = {p}' for p, pem in pems.items()]
    (tmp_path / "clients.toml").write_text("\n".join(lines) + "\n")
    return load_registration(tmp_path / "clients.toml"), pems


@pytest.mark.parametrize("rule", [AFL, RCFL])
def test_an_impostor_with_node_auth_is_dropped_even_before_the_victim_spoke(tmp_path, rule):
    registration, pems = registered(tmp_path, [0, 1, 2])
    # Node 9 holds partition 2's registered key and node 2 partition 1's; node 7 none.
    infos = [Mock(node_id=1, public_key=pems[0]), Mock(node_id=2, public_key=pems[1])]
    infos += [Mock(node_id=9, public_key=pems[2]), Mock(node_id=7, public_key=ec_key()[0])]
    attacked, clean = rule(), rule()
    for strategy in (attacked, clean):
        strategy.client_keys.claims.registration = registration
        strategy.client_keys.claims.fingerprint_of = grid_fingerprints(lambda: infos)
    # Round 1: node 9 claims partition 1 before node 2 ever replied, node 7 claims 5.
    honest = [reply(1, 0, 40, 0.5, 1.0)]
    aggregate_round(attacked, [*honest, reply(9, 1, 5000, 1e5, 9.0), reply(7, 5)], 1)
    aggregate_round(clean, honest, 1)
    dropped = attacked.train_records[1].dropped
    fingerprint = key_fingerprint(pems[2])
    assert f"node 9 (key {fingerprint}) claims client key '1'" in dropped[9]
    assert "registered for partition 2" in dropped[9]
    assert "not in" in dropped[7]
    assert attacked.state_dict() == clean.state_dict()
    # The genuine node 2 then takes partition 1, with node 9 claiming it too.
    aggregate_round(attacked, [*honest, reply(2, 1, 50), reply(9, 1, 5000, 1e5)], 2)
    aggregate_round(clean, [*honest, reply(2, 1, 50)], 2)
    assert attacked.train_records[2].accepted == [1, 2]
    assert attacked.state_dict() == clean.state_dict()


def test_a_bad_registration_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "clients.toml"
    path.write_text('[partitions]\n"SHA256:' + "a" * 43 + '" = 1\n"SHA256:' + "b" * 43 + '" = 1\n')
    with pytest.raises(RegistrationError, match=r"client-registration.*partition id 1 is"):
        load_registration(path)
    path.write_text('[partitions]\n"md5:x" = 1\n')
    with pytest.raises(RegistrationError, match="not a key fingerprint"):
        load_registration(path)
    with pytest.raises(RegistrationError, match="cannot be read"):
        load_registration(tmp_path / "missing.toml")


ALL_RULES = sorted(STRATEGIES)
NODES = (11, 12, 13, 14)


def count_round(rule, liar_count, *, clip=0.0, without_liar=False):
    """A round of honest nodes 11-14 (counts 40, 50, 60, 70) and liar node 15."""
    rng = np.random.default_rng(7)
    replies = []
    for node, count in zip((*NODES, 15), (40, 50, 60, 70, liar_count), strict=True):
        metrics = {**honest_metrics(rng, node), keys.NUM_EXAMPLES: count}
        arrays = ArrayRecord({k: Array(v) for k, v in honest_arrays(rng).items()})
        if not (without_liar and node == 15):
            replies.append(make_reply(node, arrays, metrics))
    strategy = build_strategy(rule, RUN_CONFIG, min_available_nodes=1, min_train_nodes=1)
    strategy.client_keys.counts = CountBounds(num_examples_clip=clip)
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = [*NODES, 15]
    global_record = ArrayRecord({k: Array(np.zeros(s, np.float32)) for k, s in SHAPES.items()})
    if strategy.reply_arrays_key != keys.ARRAYS:  # q-FedSGD: the arrays are its gradient
        for message in replies:
            message.content[strategy.reply_arrays_key] = message.content.pop(keys.ARRAYS)
    with server_task_identity(1):
        list(strategy.configure_train(1, global_record, ConfigRecord({"lr": 0.1}), grid))
        arrays, _ = strategy.aggregate_train(1, replies)
    return strategy, arrays


@pytest.mark.parametrize("rule", ALL_RULES)
def test_a_count_of_2_64_minus_1_is_dropped_under_every_rule(rule):
    # Default max-num-examples = 10^9: the round is the round without the liar.
    strategy, got = count_round(rule, 2**64 - 1)
    assert "above max-num-examples=1000000000" in strategy.train_records[1].dropped[15]
    _, want = count_round(rule, 2**64 - 1, without_liar=True)
    for a, b in zip(got.values(), want.values(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("rule", ALL_RULES)
def test_a_times_10_count_weighs_as_r_times_the_median_under_every_rule(rule):
    # Liar: 50 x 10 = 500. Counts 40, 50, 60, 70, 500: median 60; r = 2 clips 500 to
    # 120, so the round is the round where the liar reported 120 (not clipped: the
    # median of 40, 50, 60, 70, 120 is 60 too).
    _, got = count_round(rule, 500, clip=2.0)
    _, want = count_round(rule, 120, clip=2.0)
    for a, b in zip(got.values(), want.values(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_fedavg_share_of_a_clipped_times_10_liar_is_120_of_340():
    strategy, _ = count_round("fedavg", 500, clip=2.0)
    weights = strategy.train_records[1].weights
    assert weights[15] / sum(weights.values()) == pytest.approx(120 / 340)


def test_count_bounds_are_checked():
    with pytest.raises(ValueError, match="max-num-examples"):
        CountBounds(max_num_examples=0)
    # Counts are summed as int64: a bound of 2^64 - 1 let 2^64 - 1 overflow the round.
    assert CountBounds(max_num_examples=2**63 - 1).max_num_examples == 2**63 - 1
    with pytest.raises(ValueError, match=r"max-num-examples must be an integer from 1 to 2\^63"):
        CountBounds(max_num_examples=2**64 - 1)
    with pytest.raises(ValueError, match="num-examples-clip"):
        CountBounds(num_examples_clip=0.5)
