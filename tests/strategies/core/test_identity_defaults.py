"""Identity safe by default, sample counts bound to identity (issue 47 items 2-3).

Each test reruns an attack of the issue: an impostor in process with and without a
registration, two claims of a free key in one client-key query, a partition id out of
range, one node claiming several ids, and a count of 10^9 with and without a registration.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.client.app import app as client_app
from fairfl.contract import keys
from fairfl.dashboard.figures import drop_rows
from fairfl.dashboard.follow import RunFollower
from fairfl.server.preflight import check_run
from fairfl.server.run import run_federation
from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for
from fairfl.strategies import FedAvg
from fairfl.strategies.core.identity import (
    Claims,
    RegistrationError,
    grid_fingerprints,
    key_fingerprint,
    load_registration,
)
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, local
from tests.strategies.core.test_identity import ec_key

#: Four partitions of digits; honest nodes 1001-1003 serve partitions 0-2 (node 1002 is
#: the victim, partition 1) and node 1000 is the impostor, configured with partition 1.
TINY = {
    "num-partitions": 4,
    "min-available-nodes": 3,
    "num-server-rounds": 2,
    "local-epochs": 1,
    "fraction-evaluate": 0.0,
}
IMPOSTOR, VICTIM = 1000, 1002
HONEST = {node: config for node, config in node_configs_for(4, first_node_id=1001).items()}
del HONEST[1004]  # partition 3 is the impostor's registered one
WITH_IMPOSTOR = {IMPOSTOR: {"partition-id": 1, "num-partitions": 4}, **HONEST}


class KeyedGrid(InMemoryGrid):
    """An in-process Grid that reports each node's public key, as a SuperLink does."""

    def __init__(self, *args, public_keys: dict[int, bytes], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.public_keys = public_keys

    def get_nodes(self):
        return [SimpleNamespace(node_id=n, public_key=self.public_keys[n]) for n in self.contexts]


def run_on(nodes, run_config, public_keys=None, reply_filter=None):
    """A whole run on ``nodes`` in process (a :class:`KeyedGrid` when keys are given)."""
    checked = check_run(run_config, local_clients=True)
    if public_keys is None:
        grid = InMemoryGrid(client_app, nodes, run_config, reply_filter=reply_filter)
    else:
        grid = KeyedGrid(client_app, nodes, run_config, public_keys=public_keys)
    with server_task_identity(grid.run_id):
        return run_federation(grid, run_config, checked=checked)


def test_an_impostor_without_registration_never_takes_the_victims_slot(tmp_path):
    # Size-proportional sampling asks every node not yet keyed for its client key from
    # round 2 on. The impostor (node 1000) answers that query first; before, the first
    # answer took partition 1 for the whole run and the victim was dropped as "held by
    # node 1000". Now both answers of the free key are refused, as two first claims are
    # in a train round, and neither node holds it.
    config = {**TINY, "sampling": "size-proportional", "out-dir": str(tmp_path)}
    outcome = run_on(WITH_IMPOSTOR, config)
    records = outcome.strategy.train_records
    for server_round in (1, 2):
        record = records[server_round]
        assert IMPOSTOR not in record.accepted
        assert "also sent by nodes [1000, 1002]" in record.dropped[IMPOSTOR]
    assert "1" not in outcome.strategy.client_keys.claims.holders


def registration_file(tmp_path, pems, counts=None):
    lines = ["[partitions]"]
    lines += [f'"{key_fingerprint(pem)}" = {partition}' for partition, pem in pems.items()]
    if counts is not None:
        lines += ["[num-examples]"] + [f'"{p}" = {n}' for p, n in counts.items()]
    path = tmp_path / "clients.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_impostor_with_registration_leaves_the_victims_weights(tmp_path):
    # The impostor's key is registered for partition 3; it claims partition 1.
    pems = {partition: ec_key()[0] for partition in range(4)}
    node_keys = {1001: pems[0], 1002: pems[1], 1003: pems[2], IMPOSTOR: pems[3]}
    registration = registration_file(tmp_path, pems)
    outcomes = {}
    for name, nodes in (("attacked", WITH_IMPOSTOR), ("clean", HONEST)):
        config = {**TINY, "out-dir": str(tmp_path / name)}
        config["client-registration"] = str(registration)
        outcomes[name] = run_on(nodes, config, public_keys=node_keys)
    attacked, clean = (outcomes[n].strategy.train_records for n in ("attacked", "clean"))
    for server_round in (1, 2):
        assert "registered for partition 3" in attacked[server_round].dropped[IMPOSTOR]
        assert attacked[server_round].weights == clean[server_round].weights
        assert attacked[server_round].weights[VICTIM] > 0
    for a, b in zip(
        outcomes["attacked"].arrays.values(), outcomes["clean"].arrays.values(), strict=True
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_two_answers_of_a_free_key_to_one_query_are_both_refused(caplog):
    strategy = FedAvg()
    grid = Mock(spec=Grid)
    grid.send_and_receive.return_value = [
        make_reply(5, metrics={keys.PARTITION_ID: 1}),  # first answer: took the key before
        make_reply(6, metrics={keys.PARTITION_ID: 1}),
        make_reply(7, metrics={keys.PARTITION_ID: 0}),
    ]
    with server_task_identity(1), caplog.at_level(logging.WARNING, logger="fairfl"):
        found = strategy.learn_client_keys(grid, [5, 6, 7])
    assert found == {5: "node-5", 6: "node-6", 7: "0"}
    assert strategy.client_keys.claims.holders == {"0": 7}
    assert "node 5 refused: client key '1' (partition-id) also sent by nodes [5, 6]" in (
        caplog.text
    )


def test_a_partition_id_outside_num_partitions_is_dropped():
    strategy = FedAvg()
    strategy.client_keys.claims.num_partitions = 3
    replies = [reply(1, 0), reply(2, 2), reply(9, 3), reply(8, 104)]
    aggregate_round(strategy, replies)
    record = strategy.train_records[1]
    assert record.accepted == [1, 2]
    want = "node 9 claims partition-id 3, outside [0, num-partitions=3); dropped"
    assert record.dropped[9] == want
    assert "partition-id 104, outside" in record.dropped[8]
    assert sorted(strategy.client_keys.claims.holders) == ["0", "2"]


def test_the_server_app_bounds_partition_ids_by_num_partitions(tmp_path):
    # The attack through a whole run: node 1003's replies claim partition 7 of 4.
    def claims_partition_7(instruction, answer):
        if answer.metadata.src_node_id == 1003 and not answer.has_error():
            answer.content["metrics"][keys.PARTITION_ID] = 7
        return answer

    config = {**TINY, "num-server-rounds": 1, "out-dir": str(tmp_path)}
    outcome = run_on(HONEST, config, reply_filter=claims_partition_7)
    dropped = outcome.strategy.train_records[1].dropped
    assert "claims partition-id 7, outside [0, num-partitions=4)" in dropped[1003]


def reply(node: int, partition: int, count: int = 50):
    metrics = {keys.NUM_EXAMPLES: count, keys.PARTITION_ID: partition}
    return make_reply(node, local(float(node)), metrics)


def test_one_node_claiming_five_ids_holds_one_and_honest_clients_are_admitted():
    # The attack: node 9 claims partition 100 + r in round r, beside honest nodes
    # 1-3; max-clients = 5. Before, it held 101 and 102, filling max-clients, and the new
    # honest node 4 (partition 3) was refused in round 6.
    strategy = FedAvg()
    strategy.client_keys.claims.max_clients = 5
    honest = [reply(1, 0), reply(2, 1), reply(3, 2)]
    for server_round in range(1, 6):
        aggregate_round(strategy, [*honest, reply(9, 100 + server_round)], server_round)
    assert strategy.client_keys.claims.holders == {"0": 1, "1": 2, "2": 3, "101": 9}
    assert "holds ['101'] already (max-keys-per-node=1)" in strategy.train_records[2].dropped[9]
    aggregate_round(strategy, [*honest, reply(4, 3)], server_round=6)
    assert strategy.train_records[6].accepted == [1, 2, 3, 4]


def test_a_node_at_its_key_limit_cannot_silence_a_first_claimant():
    # Node 9 holds partition 0 and claims partition 1 in the round its owner first speaks:
    # it is refused alone, and node 2 takes partition 1.
    claims = Claims()
    assert claims.resolve("0", [9]) == (9, {})
    owner, refused = claims.resolve("1", [2, 9])
    assert owner == 2 and list(refused) == [9] and "max-keys-per-node=1" in refused[9]
    more = Claims(max_keys_per_node=2)
    assert more.resolve("0", [9]) == (9, {}) and more.resolve("1", [9]) == (9, {})
    with pytest.raises(ValueError, match="max-keys-per-node must be an integer >= 1, got 0"):
        Claims(max_keys_per_node=0)


def registered_strategy(tmp_path, counts):
    """FedAvg bound to a registration of nodes 1-3 (partitions 0-2) with ``counts``."""
    pems = {partition: ec_key()[0] for partition in range(3)}
    registration = load_registration(registration_file(tmp_path, pems, counts))
    infos = [SimpleNamespace(node_id=p + 1, public_key=pem) for p, pem in pems.items()]
    strategy = FedAvg()
    strategy.client_keys.claims.registration = registration
    strategy.client_keys.claims.fingerprint_of = grid_fingerprints(lambda: infos)
    return strategy


def test_a_count_of_10_9_with_registration_weighs_the_registered_count(tmp_path):
    # Registered counts 40, 50, 60; node 2 claims 10^9 (the default max-num-examples, so
    # not dropped). FedAvg weighs it 50 / 150, not 10^9 / (10^9 + 100).
    strategy = registered_strategy(tmp_path, {0: 40, 1: 50, 2: 60})
    aggregate_round(strategy, [reply(1, 0, 40), reply(2, 1, 10**9), reply(3, 2, 60)])
    record = strategy.train_records[1]
    assert record.weights[2] / sum(record.weights.values()) == pytest.approx(50 / 150)
    assert record.diagnostics["num-examples-claimed"] == {2: 10**9}


def test_a_registration_without_counts_weighs_the_claims(tmp_path):
    strategy = registered_strategy(tmp_path, None)
    aggregate_round(strategy, [reply(1, 0, 40), reply(2, 1, 80), reply(3, 2, 80)])
    record = strategy.train_records[1]
    assert record.weights[2] / sum(record.weights.values()) == pytest.approx(80 / 200)
    assert "num-examples-claimed" not in record.diagnostics


def test_registered_counts_are_checked(tmp_path):
    pems = {0: ec_key()[0], 1: ec_key()[0]}
    with pytest.raises(RegistrationError, match=r"no count for registered partition\(s\) \[1\]"):
        load_registration(registration_file(tmp_path, pems, {0: 40}))
    with pytest.raises(RegistrationError, match="names '2', not a registered partition id"):
        load_registration(registration_file(tmp_path, pems, {0: 40, 1: 5, 2: 5}))
    with pytest.raises(RegistrationError, match="partition 1 must be an integer from 1"):
        load_registration(registration_file(tmp_path, pems, {0: 40, 1: 0}))


def test_a_count_of_10_9_without_registration_is_flagged_in_the_round_record(tmp_path):
    # Honest digits partitions hold tens to hundreds of samples: 10^9 is far above
    # count-flag-ratio = 100 times the median. The round is flagged in rounds.jsonl and
    # listed on the dashboard; nothing is dropped.
    def claims_10_9(instruction, answer):
        if answer.metadata.src_node_id == 1002 and instruction.metadata.message_type == "train":
            answer.content["metrics"][keys.NUM_EXAMPLES] = 10**9
        return answer

    config = {**TINY, "num-server-rounds": 1, "out-dir": str(tmp_path)}
    outcome = run_on(HONEST, config, reply_filter=claims_10_9)
    assert outcome.strategy.train_records[1].accepted == [1001, 1002, 1003]
    (line,) = (tmp_path / "rounds.jsonl").read_text().splitlines()
    flag = json.loads(line)["train"]["diagnostics"]["num-examples-flag"]
    assert flag.startswith("node 1002 claims num-examples 1000000000, ")
    assert "(above count-flag-ratio=100)" in flag
    run = RunFollower(tmp_path, "flagged")
    run.refresh()
    assert (1, "train", "-", f"counts flagged: {flag}") in drop_rows(run)


def test_count_flag_ratio_zero_opts_out():
    strategy = FedAvg()
    strategy.client_keys.counts.count_flag_ratio = 0.0
    aggregate_round(strategy, [reply(1, 0, 40), reply(2, 1, 10**9), reply(3, 2, 60)])
    assert "num-examples-flag" not in strategy.train_records[1].diagnostics
    default = FedAvg()
    aggregate_round(default, [reply(1, 0, 40), reply(2, 1, 10**9), reply(3, 2, 60)])
    assert "num-examples-flag" in default.train_records[1].diagnostics


def test_node_auth_without_registration_refuses_to_start(tmp_path, caplog):
    config = {**TINY, "out-dir": str(tmp_path), "node-auth": True}
    with pytest.raises(ValueError, match=r"node-auth is true .* client-registration is empty"):
        check_run(config, local_clients=True)
    # client-registration = "none": it runs, and says once what is left open.
    config = {**config, "client-registration": "none"}
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        run_on(HONEST, config)
    assert caplog.text.count("client-registration='none'") == 1
