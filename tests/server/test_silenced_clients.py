"""A client a rule holds at weight 0 is named: per round and, for a whole run, in the summary.

FairFed clips its weights ω_k at 0 and AFL's λ_i can reach 0 (issue 47: one client sat at
weight 0 for all 20 rounds of a committed FairFed run and nothing said so).
"""

import json

import pytest
import torch

from fairfl.server.results import silenced, silenced_throughout
from fairfl.simulation import run_inprocess


def weights(**by_partition: float) -> list[dict]:
    return [
        {"node_id": 1000 + int(p[1:]), "partition_id": int(p[1:]), "weight": w}
        for p, w in by_partition.items()
    ]


def test_a_client_at_weight_0_in_every_round_it_took_part_in_is_named():
    rounds = [
        {"train": {"weights": weights(p0=0.0, p1=1.0)}},
        {"train": {"weights": weights(p0=0.0, p1=0.0, p2=1.0)}},
        {"train": {"weights": weights(p1=1.0, p2=0.0)}},
        {"metrics": {}},  # a round without training
    ]
    assert [silenced(r.get("train", {}).get("weights", [])) for r in rounds] == [
        [0],
        [0, 1],
        [2],
        [],
    ]
    # p0: used twice, silenced twice. p1 and p2 were heard in some round.
    assert silenced_throughout(rounds) == {"0": 2}
    unknown = [{"node_id": 7, "partition_id": None, "weight": 0.0}]
    assert silenced(unknown) == [7]  # no partition id: the node id
    assert silenced_throughout([]) == {}


@pytest.mark.integration
def test_fairfed_clipped_clients_are_in_the_round_records_and_the_summary(tmp_path):
    config = {
        "strategy": "fairfed",
        "fairfed-beta": 100.0,  # a large step: clients above the mean gap clip to 0 at once
        "dataset": "adult-synthetic",
        "partitioner": "dirichlet",
        "dirichlet-alpha": 0.1,
        "num-partitions": 4,
        "num-server-rounds": 2,
        "model": "logreg",
        "out-dir": str(tmp_path),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_inprocess(config)
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    for line in lines:
        zero = sorted(w["partition_id"] for w in line["train"]["weights"] if w["weight"] == 0)
        assert line["train"]["silenced"] == zero
    assert any(line["train"]["silenced"] for line in lines)
    summary = json.loads((tmp_path / "summary.json").read_text())
    always = set.intersection(*(set(line["train"]["silenced"]) for line in lines))
    assert summary["silenced_clients"] == {str(k): 2 for k in sorted(always)}
