"""Churn: deployed runs in which SuperNodes leave and rejoin.

Three SuperNodes (``deploy/localfed.py``: network namespaces, TLS, SuperNode
authentication) train AFL, whose per-client λ must survive every absence. A schedule
sends one node at a time away for a few rounds: a graceful leave (SIGTERM: the SuperNode
deactivates itself) and a crash (SIGKILL: the SuperLink notices when its heartbeats
lapse); each comes back under its own key, so with its old node id. At the end every
round's record adds up (sampled = answered + dropped, for training and evaluation; a
round in which nobody evaluated has ``num-clients`` 0), each absence shows in the rounds
it covers, every node trains again after it returns under its old node id, the
checkpoint and the final model load, the ledger of ``rounds.jsonl`` holds, λ keeps one
entry per client on the simplex, and λ and the model equal, bit for bit, those of the
in-process runner with each node silent exactly where the deployed one did not answer
(nothing lost, nothing applied twice). No process or namespace is left.

Two sizes (issue 41): the short churn test (12 rounds, one leave and one crash) runs in
CI; the soak (50 rounds, four seeded absences, about 15 minutes on an idle machine) only
with ``-m soak``. Their waits follow the machine: a calibration round on the federation
(:mod:`pacing`) sets the round-timeout and the run's limit.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message
from localfed import LocalFederation, app_run_config, read_rounds, why_no_proxy
from pacing import calibrate

from fairfl.server.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fairfl.simulation import run_inprocess
from fairfl.telemetry.ledger import verify_ledger

pytestmark = pytest.mark.deployment

N_SUPERNODES = 3
SEED = 2026
#: A crashed node's message is answered by Flower once its heartbeats lapse (<= 60 s).
HEARTBEAT_LAPSE = 60.0

#: (node index, leave after round, return after round, how)
Absence = tuple[int, int, int, str]


@dataclass(frozen=True)
class Churn:
    """One churn run: its rounds, how often it evaluates, and who is away when."""

    rounds: int
    evaluate_every: int
    schedule: list[Absence]

    def overrides(self, round_timeout: float) -> dict[str, Any]:
        return {
            "strategy": "afl",
            "num-server-rounds": self.rounds,
            "num-partitions": N_SUPERNODES,
            "local-epochs": 1,
            # A run of rounds, not of evaluations; the last round always evaluates.
            "evaluate-every": self.evaluate_every,
            # Sample whoever is connected; never wait for a node that is away.
            "min-available-nodes": 1,
            # A backstop for a lost reply; a crashed node's message is answered by Flower
            # once its heartbeats lapse.
            "round-timeout": round_timeout,
            "seed": 5,
        }


def churn_schedule(seed: int, rounds: int = 50) -> list[Absence]:
    """Seeded absences of the soak: four of 2-5 rounds, one node away at a time.

    Spread over the run; the second is a crash, the others graceful leaves.
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
    assert schedule[-1][2] < rounds - 3, schedule
    return schedule


#: CI's churn: a leave and a crash, each 3 rounds away (one round of margin for a slow
#: leave or restart), and 4 rounds after the last return for every node to train again.
SHORT = Churn(rounds=12, evaluate_every=4, schedule=[(0, 1, 4, "leave"), (2, 5, 8, "crash")])
#: The soak: 50 rounds, four seeded absences.
SOAK = Churn(rounds=50, evaluate_every=10, schedule=churn_schedule(SEED))


def test_short_churn(tmp_path: Path, record_property) -> None:
    run_churn(SHORT, tmp_path, record_property)


@pytest.mark.soak
def test_churn_soak(tmp_path: Path, record_property) -> None:
    run_churn(SOAK, tmp_path, record_property)


def run_churn(churn: Churn, tmp_path: Path, record_property) -> None:
    """Run ``churn`` on a fresh federation, drive its absences, check what it left."""
    reason = why_no_proxy()
    if reason is not None:
        pytest.skip(reason)
    schedule = churn.schedule
    print(f"schedule (node, leave after, back after, how): {schedule}")
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    started = time.monotonic()
    fed = LocalFederation(tmp_path / "fed", supernodes=N_SUPERNODES, network=network)
    with fed:
        if fed.mode != "netns":
            warnings.warn(f"ran on loopback: {fed.fallback_reason}", stacklevel=1)
        pace = calibrate(fed, churn.overrides(0.0))
        overrides = churn.overrides(pace.round_timeout())
        crashes = sum(how == "crash" for _, _, _, how in schedule)
        # Each absence also waits for the node's restart (at most its ready timeout).
        extra = crashes * HEARTBEAT_LAPSE + len(schedule) * fed.ready_timeout
        run_timeout = pace.run_timeout(churn.rounds, extra=extra, ceiling=4 * 3600.0)
        out_dir = fed.out_dir("churn")
        finished: list[subprocess.CompletedProcess] = []
        runner = threading.Thread(
            target=lambda: finished.append(
                fed.submit_run(overrides, name="churn", timeout=run_timeout)
            ),
            daemon=True,
        )
        runner.start()
        pending = list(schedule)
        away: dict[int, Absence] = {}
        # (event, node index, rounds logged when it began, rounds logged when it ended)
        happened: list[tuple[str, int, int, int]] = []
        deadline = time.monotonic() + run_timeout + 60
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
        assert finished, f"the churn run did not end in {run_timeout:.0f}s\n{fed.log_tails()}"
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
    check_churn(churn, overrides, out_dir, happened, tmp_path / "inprocess")


def check_churn(
    churn: Churn,
    overrides: dict[str, Any],
    out_dir: Path,
    happened: list[tuple[str, int, int, int]],
    scratch: Path,
) -> None:
    """The checks on a churn run's out-dir and the churn events that happened."""
    lines = read_rounds(out_dir)
    assert [line["round"] for line in lines] == list(range(1, churn.rounds + 1))
    # Every node trained in some round (and does in the last, checked below).
    partition_of = {
        w["node_id"]: w["partition_id"] for line in lines for w in line["train"]["weights"]
    }
    assert sorted(partition_of.values()) == list(range(N_SUPERNODES)), partition_of
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
        # The same record in every round: the count is there when nobody evaluated.
        assert line["metrics"]["num-clients"] == len(evaluated), line
        if evaluated:
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
    assert checkpoint.server_round == churn.rounds
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
        app_run_config({**overrides, "out-dir": str(scratch)}),
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
        f"{churn.rounds} rounds in {times[-1]:.0f}s: median {np.median(durations):.1f}s, "
        f"max {durations.max():.1f}s a round"
    )
