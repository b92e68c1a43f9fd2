"""What a client holds across rounds under a two-round form (FairFed's ω_k), and its loss.

FairFed's two-round form keeps each client's weight ω_k on the client
(fairfl.secagg.forms.held_after): in its ``Context.state`` and, with node config
``secagg-state-dir``, in ``<dir>/run-<run id>/client-<client key>.json``
(fairfl.secagg.held). A restarted SuperNode has an empty ``Context.state``: with the
folder it reads ω_k back; without it, a client the server counts as holding ω_k
(``fairfed-held``) refuses the round, which records the drop naming the key, and
starts again from ω_k^0 = n_k / n in the next. Semi-VRed and FedFa hold nothing across
rounds (their kept metric lives for one round: a client restarted within a round has
no update for the later sums and drops, test_secagg_later_drops.py's case).
"""

from __future__ import annotations

import json

import pytest
from flwr.app import Context, Message, RecordDict

from fairfl.secagg import forms
from fairfl.secagg.client import HELD
from fairfl.secagg.held import STATE_DIR_KEY, held_path, load_held, save_held
from fairfl.secagg.protocol import CLIENT_PART, RECORD, Stage
from fairfl.simulation import run_inprocess
from fairfl.simulation.inprocess import node_configs_for
from tests.secagg.test_secagg_rules import ADULT, SHARES, _config


def _context(node_config: dict, node_id: int = 1003) -> Context:
    return Context(
        run_id=7, node_id=node_id, node_config=node_config, state=RecordDict(), run_config={}
    )


def test_held_weights_go_to_the_state_dir_and_come_back_after_a_restart(tmp_path):
    node_config = {"partition-id": 2, STATE_DIR_KEY: str(tmp_path)}
    before = _context(node_config)
    save_held(before, {"fairfed-weight": 0.25})
    path = tmp_path / "run-7" / "client-2.json"
    assert held_path(tmp_path, 7, "2") == path
    assert json.loads(path.read_text()) == {"fairfed-weight": 0.25}
    assert [p.name for p in path.parent.iterdir()] == ["client-2.json"]  # no temporary left
    save_held(before, {"fairfed-weight": 0.5})  # replaced, not appended
    assert json.loads(path.read_text()) == {"fairfed-weight": 0.5}
    restarted = _context(node_config)  # a new SuperNode process: an empty Context.state
    assert load_held(restarted) == {"fairfed-weight": 0.5}
    assert dict(restarted.state.config_records[HELD]) == {"fairfed-weight": 0.5}


def test_a_node_without_a_partition_id_keys_its_file_by_node_id(tmp_path):
    save_held(_context({STATE_DIR_KEY: str(tmp_path)}, node_id=42), {"fairfed-weight": 1.0})
    assert json.loads((tmp_path / "run-7" / "client-node-42.json").read_text()) == {
        "fairfed-weight": 1.0
    }


def test_without_a_state_dir_the_weight_lives_in_the_context_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    context = _context({"partition-id": 2})
    assert load_held(context) == {}
    save_held(context, {"fairfed-weight": 0.25})
    assert load_held(context) == {"fairfed-weight": 0.25}
    assert list(tmp_path.iterdir()) == []
    assert load_held(_context({"partition-id": 2})) == {}  # a restart loses it


def test_a_corrupt_held_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "run-7" / "client-2.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"fairfed-weight": "x"}')
    with pytest.raises(ValueError, match=f"client-2.json \\(node config {STATE_DIR_KEY}\\)"):
        load_held(_context({"partition-id": 2, STATE_DIR_KEY: str(tmp_path)}))


@pytest.mark.parametrize(
    ("part", "held", "expected"),
    [
        # Counted as a holder, holding nothing: it restarts from the ω_k^0 sent.
        ({"fairfed-held": True}, {}, {"fairfed-weight": 0.2}),
        ({"fairfed-held": True}, {"fairfed-weight": 0.3}, None),  # it holds ω_k
        ({"fairfed-held": False}, {}, None),  # a client first seen: ω_k^0, no loss
        ({}, {}, None),  # a server that does not say
    ],
)
def test_a_lost_weight_is_told_from_a_first_round(part, held, expected):
    part = {forms.WEIGHT_KIND: "fairfed-counts", forms.FAIRFED_PREVIOUS: 0.2, **part}
    assert forms.restarted_held(part, held) == expected
    later = {**part, forms.WEIGHT_KIND: "fairfed-gaps"}  # only the first sum checks
    assert forms.restarted_held(later, held) is None


def _restarting(nodes: set[int], at_round: int):
    """fairfl's ClientApp, with ``nodes``' Context.state emptied when round ``at_round`` starts.

    As a SuperNode restarted between rounds: its ClientApp starts with a new Context.
    """
    from fairfl.client.app import app

    held: dict[int, tuple[dict, dict | None]] = {}  # when it restarted: held, and on disk

    def client_app(message: Message, context: Context) -> Message:
        records = message.content.config_records
        record, config = records.get(RECORD), records.get("config")
        starts = record is not None and record["stage"] == Stage.SETUP and config is not None
        if starts and config["server-round"] == at_round and context.node_id in nodes:
            folder = context.node_config.get(STATE_DIR_KEY)
            path = None if folder is None else held_path(folder, context.run_id, "2")
            stored = None if path is None else json.loads(path.read_text())
            held[context.node_id] = (dict(context.state.config_records[HELD]), stored)
            context.state = RecordDict()
        return app(message, context)

    return client_app, held


def test_a_restarted_supernode_keeps_its_weight_with_a_state_dir_and_reports_its_loss_without(
    tmp_path,
):
    # Nodes 1003 and 1004 restart before round 2; only 1003's node config names a state
    # dir. 1003 reads ω_k back and takes part; 1004 refuses round 2, recorded with the
    # key to set, and is back in round 3 from ω_k^0.
    nodes = node_configs_for(5)
    nodes[1003] = {**nodes[1003], STATE_DIR_KEY: str(tmp_path / "held")}
    client_app, held = _restarting({1003, 1004}, at_round=2)
    parts: dict[tuple[int, int], bool] = {}  # (round, node) -> the first sum's fairfed-held
    state = {"round": 0}

    def capture(instruction: Message, reply: Message) -> Message:
        records = instruction.content.config_records
        if "config" in records and RECORD in records:
            state["round"] = int(records["config"]["server-round"])
        part = records.get(CLIENT_PART)
        if part is not None and part[forms.WEIGHT_KIND] == "fairfed-counts":
            parts[state["round"], instruction.metadata.dst_node_id] = part[forms.FAIRFED_HELD]
        return reply

    config = _config(
        tmp_path,
        "secure",
        strategy="fairfed",
        **ADULT,
        **SHARES,
        **{"secure-aggregation": "secagg+", "num-server-rounds": 3, "evaluate-every": 3},
    )
    outcome = run_inprocess(config, client_app=client_app, reply_filter=capture, node_configs=nodes)
    # Round 1 holds nothing; from round 2 every client of an earlier weighted sum does.
    assert {parts[1, n] for n in nodes} == {False}
    assert {parts[t, n] for t in (2, 3) for n in nodes} == {True}
    # 1003's file (partition 2) held the ω_k it had when it restarted; 1004 had none.
    weight, stored = held[1003]
    assert stored == weight and set(weight) == {"fairfed-weight"}
    assert held[1004][1] is None
    records = outcome.strategy.train_records
    assert records[2].accepted == [1001, 1002, 1003, 1005]
    reason = records[2].dropped[1004]
    assert reason.startswith("secure aggregation: lost at stage collect_masked_vectors")
    assert "lost the weight" in reason and STATE_DIR_KEY in reason
    assert records[2].skipped is None and records[3].accepted == sorted(nodes)
    lines = (tmp_path / "secure" / "rounds.jsonl").read_text().splitlines()
    second = next(json.loads(x) for x in lines if json.loads(x)["round"] == 2)
    assert second["train"]["dropped"]["1004"] == reason
