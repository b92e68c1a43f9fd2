"""Churn soak: a 50-round deployed run in which SuperNodes leave and rejoin.

Three SuperNodes (``deploy/localfed.py``: network namespaces, TLS, SuperNode
authentication) train AFL, whose per-client λ must survive every absence, for
``ROUNDS`` rounds. A seeded schedule sends one node at a time away for a few rounds:
most leave gracefully (SIGTERM: the SuperNode deactivates itself), one crashes (SIGKILL:
the SuperLink notices when its heartbeats lapse); each comes back under its own key,
so with its old node id. At the end every round's record adds up (sampled = answered +
dropped, for training and evaluation), each absence shows in the rounds it covers,
every node trains again after it returns under its old node id, the checkpoint and the
final model load, the ledger of ``rounds.jsonl`` holds, λ keeps one entry per client on
the simplex, and λ and the model equal, bit for bit, those of the in-process runner with
each node silent exactly where the deployed one did not answer (nothing lost, nothing
applied twice). No process or namespace is left. The run is bounded (``RUN_TIMEOUT``)
and ends itself.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message
from localfed import LocalFederation, app_run_config, read_rounds, why_no_proxy

from fairfl.server.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fairfl.simulation import run_inprocess
from fairfl.telemetry.ledger import verify_ledger

pytestmark = pytest.mark.deployment

N_SUPERNODES = 3
ROUNDS = 50
SEED = 2026
RUN_TIMEOUT = 1500.0  # the whole run; about 7-15 s a round here

OVERRIDES: dict[str, Any] = {
    "strategy": "afl",
    "num-server-rounds": ROUNDS,
    "num-partitions": N_SUPERNODES,
    "local-epochs": 1,
    # Evaluation every 10 rounds (and the last): a soak of rounds, not of evaluations.
    "evaluate-every": 10,
    # Sample whoever is connected; never wait for a node that is away.
    "min-available-nodes": 1,
    # A backstop: a crashed node's message is answered by Flower once its heartbeats
    # lapse (<= 60 s).
    "round-timeout": 120.0,
    "seed": 5,
}


def churn_schedule(seed: int) -> list[tuple[int, int, int, str]]:
    """Seeded absences: (node index, leave after round, return after round, how).

    Four absences of 2-5 rounds, one node away at a time, spread over the run; the
    second is a crash, the others graceful leaves.
    """
    rng = random.Random(seed)
    schedule = []
    start = 3
    for k in range(4):
        leave = start + rng.randint(0, 3)
        back = leave + rng.randint(2, 5)
        how = "crash" if k == 1 else "leave"
        schedule.append((rng.randrange(N_SUPERNODES), leave, back, how))
        start = back + 5
    assert schedule[-1][2] < ROUNDS - 3, schedule
    return schedule


def test_churn_soak(tmp_path: Path, record_property) -> None:
    reason = why_no_proxy()
    if reason is not None:
        pytest.skip(reason)
    schedule = churn_schedule(SEED)
    print(f"schedule (node, leave after, back after, how): {schedule}")
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    started = time.monotonic()
    fed = LocalFederation(tmp_path / "fed", supernodes=N_SUPERNODES, network=network)
    with fed:
        if fed.mode != "netns":
            warnings.warn(f"ran on loopback: {fed.fallback_reason}", stacklevel=1)
        out_dir = fed.out_dir("soak")
        finished: list[subprocess.CompletedProcess] = []
        runner = threading.Thread(
            target=lambda: finished.append(
                fed.submit_run(OVERRIDES, name="soak", timeout=RUN_TIMEOUT)
            ),
            daemon=True,
        )
        runner.start()
        pending = list(schedule)
        away: dict[int, tuple[int, int, int, str]] = {}
        # (event, node index, rounds logged when it began, rounds logged when it ended)
        happened: list[tuple[str, int, int, int]] = []
        deadline = time.monotonic() + RUN_TIMEOUT + 60
        while runner.is_alive() and time.monotonic() < deadline:
            logged = len(read_rounds(out_dir))
            if pending and not away and logged >= pending[0][1]:
                event = pending.pop(0)
                index, _, _, how = event
                if how == "crash":
                    fed.kill_supernode(index)
                else:
                    fed.leave_supernode(index)
                away[index] = event
                happened.append((how, index, logged, len(read_rounds(out_dir))))
            for index, (_, _, back, _) in list(away.items()):
                if logged >= back:
                    fed.restart_supernode(index)
                    del away[index]
                    happened.append(("rejoin", index, logged, len(read_rounds(out_dir))))
            time.sleep(0.3)
        runner.join(timeout=5)
        assert finished, f"the soak did not end in {RUN_TIMEOUT}s\n{fed.log_tails()}"
        assert finished[0].returncode == 0, fed.log_tails()
        namespaces = list(fed.namespaces)
        pids = [p.popen.pid for p in fed.procs]
    wall = time.monotonic() - started
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in namespaces if ns in listed.split()], listed
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    print(f"events (event, node, rounds logged at start and end): {happened}; {wall:.0f}s")
    record_property("events", json.dumps(happened))
    assert len(happened) == 2 * len(schedule), happened
    check_soak(out_dir, happened, tmp_path / "inprocess")


def check_soak(out_dir: Path, happened: list[tuple[str, int, int, int]], scratch: Path) -> None:
    """The soak's checks on its out-dir and the churn events that happened."""
    lines = read_rounds(out_dir)
    assert [line["round"] for line in lines] == list(range(1, ROUNDS + 1))
    # Round 1 trains every node (nobody is away yet); it is not an evaluation round.
    partition_of = {w["node_id"]: w["partition_id"] for w in lines[0]["train"]["weights"]}
    assert sorted(partition_of.values()) == list(range(N_SUPERNODES)), lines[0]
    node_of = {p: n for n, p in partition_of.items()}
    for line in lines:
        sampled = line["sampled"]
        trained = {w["node_id"] for w in line["train"]["weights"]}
        dropped = set(map(int, line["train"]["dropped"]))
        assert not trained & dropped and len(trained | dropped) == sampled["train"], line
        assert trained, line  # every round trained someone
        # Nodes unknown to the federation never appear.
        assert trained | dropped <= set(partition_of), line
        evaluated = {c["node_id"] for c in line["clients"]}
        eval_dropped = set(map(int, line["evaluate_dropped"]))
        assert len(evaluated | eval_dropped) == sampled["evaluate"], line
        if sampled["evaluate"]:
            assert line["metrics"]["num-clients"] == len(evaluated), line
            for name in ("acc-mean", "acc-worst-10", "loss-mean"):
                assert math.isfinite(line["metrics"][name]), (name, line)
        weights = [w["weight"] for w in line["train"]["weights"]]
        assert sum(weights) == pytest.approx(1.0), line
    # Each absence shows: the node trains in no round that began after it left and
    # ended before its restart began, and it trains again after it is back.
    events = iter(happened)
    for gone, back in zip(events, events, strict=True):
        node = node_of[gone[1]]
        assert back[0] == "rejoin" and back[1] == gone[1], (gone, back)
        missing = [
            line["round"]
            for line in lines
            if node not in {w["node_id"] for w in line["train"]["weights"]}
        ]
        absent = range(gone[3] + 2, back[2] + 1)
        assert absent and set(absent) <= set(missing), (gone, back, missing)
        later = [line for line in lines if line["round"] > back[3] + 1]
        assert any(node in {w["node_id"] for w in line["train"]["weights"]} for line in later), (
            gone,
            back,
        )
    last = lines[-1]
    assert {w["node_id"] for w in last["train"]["weights"]} == set(partition_of), last
    assert {c["node_id"] for c in last["clients"]} == set(partition_of), last

    # Nothing lost: the chain, the checkpoint, the final model, λ for every client.
    report = verify_ledger(out_dir)
    assert report.ok, report
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    checkpoint = load_checkpoint(out_dir / CHECKPOINT_FILE)
    assert checkpoint.server_round == ROUNDS
    lambdas = checkpoint.strategy_state["lambdas"]
    assert set(lambdas) == {str(p) for p in range(N_SUPERNODES)}, lambdas
    assert sum(lambdas.values()) == pytest.approx(1.0) and min(lambdas.values()) >= 0
    final = np.load(out_dir / "final_model.npz")
    assert final.files and all(np.isfinite(final[k]).all() for k in final.files)
    # Nothing lost or applied twice: the in-process runner, each node silent exactly
    # where the deployed one did not answer (away, crashed, or its reply lost), ends
    # with the same λ and the same model, bit for bit.
    silent: set[tuple[int, str, int]] = set()
    for line in lines:
        trained = {w["node_id"] for w in line["train"]["weights"]}
        silent |= {(line["round"], "train", n) for n in partition_of if n not in trained}
        if line["sampled"]["evaluate"]:
            evaluated = {c["node_id"] for c in line["clients"]}
            silent |= {(line["round"], "evaluate", n) for n in partition_of if n not in evaluated}

    def as_deployed(instruction: Message, reply: Message) -> Message | None:
        server_round = int(instruction.content["config"]["server-round"])
        key = (server_round, instruction.metadata.message_type, instruction.metadata.dst_node_id)
        return None if key in silent else reply

    outcome = run_inprocess(
        app_run_config({**OVERRIDES, "out-dir": str(scratch)}),
        node_configs={
            node: {"partition-id": p, "num-partitions": N_SUPERNODES, "device": "cpu"}
            for node, p in partition_of.items()
        },
        reply_filter=as_deployed,
    )
    assert outcome.strategy.state_dict()["lambdas"] == lambdas
    for key, array in outcome.arrays.items():
        np.testing.assert_array_equal(final[key], array.numpy(), err_msg=key)
    times = [0.0] + [line["wall_time"] for line in lines]
    durations = np.diff(times)
    print(
        f"{ROUNDS} rounds in {times[-1]:.0f}s: median {np.median(durations):.1f}s, "
        f"max {durations.max():.1f}s a round"
    )
