"""FedMGDA+ end to end through the in-process runner, and the scaling attack."""

import json

import numpy as np
import pytest
from flwr.app import Array

from fairfl.simulation import run_inprocess

SYNTHETIC = {
    "dataset": "synthetic",
    "partitioner": "natural",
    "model": "logreg",
    "num-partitions": 5,
    "num-server-rounds": 2,
    "fraction-evaluate": 0.0,
}


def scaling_attacker(node_id, factor):
    """Reply filter: ``node_id`` sends w_t − factor·(w_t − w_i) (paper 001 §6.2.2)."""

    def attack(instruction, reply):
        if (
            instruction.metadata.dst_node_id != node_id
            or instruction.metadata.message_type != "train"
            or reply.has_error()
        ):
            return reply
        sent = instruction.content["arrays"]
        arrays = reply.content["arrays"]
        for key in list(arrays.keys()):
            w_t = sent[key].numpy().astype(np.float64)
            w_i = arrays[key].numpy()
            arrays[key] = Array((w_t - factor * (w_t - w_i)).astype(w_i.dtype))
        return reply

    return attack


def flat(record):
    return np.concatenate([a.numpy().ravel().astype(np.float64) for a in record.values()])


def test_fedmgda_three_rounds_end_to_end(tmp_path):
    out = run_inprocess(
        {
            "strategy": "fedmgda",
            "num-partitions": 5,
            "num-server-rounds": 3,
            "lr": 0.1,
            "fedmgda-global-lr": 1.0,
            "out-dir": str(tmp_path),
        }
    )
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [1, 2, 3]
    for line in lines:
        train = line["train"]
        assert train["accepted"] == 5
        weights = [w["weight"] for w in train["weights"]]
        assert sum(weights) == pytest.approx(1.0, abs=1e-9)
        assert min(weights) >= 0.0
        assert sorted(w["partition_id"] for w in train["weights"]) == [0, 1, 2, 3, 4]
        assert train["diagnostics"]["qp-status"] == "optimal"
        assert train["diagnostics"]["step-size"] == 1.0
    assert lines[-1]["metrics"]["acc-mean"] > lines[0]["metrics"]["acc-mean"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["strategy"] == "FedMGDA+"
    assert summary["strategy_settings"]["epsilon"] == 1.0
    assert np.all(np.isfinite(flat(out.arrays)))


def test_scaling_attacker_moves_fedavg_far_more_than_fedmgda_plus(tmp_path):
    attack = scaling_attacker(1001, 100.0)
    moved = {}
    for strategy in ("fedavg", "fedmgda"):
        config = {**SYNTHETIC, "strategy": strategy}
        clean = run_inprocess({**config, "out-dir": str(tmp_path / f"{strategy}-clean")})
        hit = run_inprocess(
            {**config, "out-dir": str(tmp_path / f"{strategy}-hit")}, reply_filter=attack
        )
        moved[strategy] = np.linalg.norm(flat(hit.arrays) - flat(clean.arrays))
    # Normalisation removes the factor: FedMGDA+ sees the same ḡ and takes the same step.
    assert moved["fedavg"] > 1.0
    assert moved["fedmgda"] < 1e-3 * moved["fedavg"], moved


def test_mgda_prox_sends_mu_to_the_clients(tmp_path):
    base = run_inprocess({**SYNTHETIC, "strategy": "fedmgda", "out-dir": str(tmp_path / "a")})
    prox = run_inprocess(
        {**SYNTHETIC, "strategy": "mgda-prox", "mgda-prox-mu": 5.0, "out-dir": str(tmp_path / "b")}
    )
    # Same seed and data: only the clients' proximal term differs.
    assert np.linalg.norm(flat(prox.arrays) - flat(base.arrays)) > 1e-4
