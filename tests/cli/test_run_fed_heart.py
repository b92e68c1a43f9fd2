"""``fairfl run`` on FLamby's Fed-Heart-Disease: the four hospitals train, in process."""

from __future__ import annotations

import json

from fairfl.cli import main


def test_run_fedavg_on_fed_heart_disease_trains_the_four_hospitals(shared_data_root, tmp_path):
    out = tmp_path / "heart"
    argv = ["run", "--strategy", "fedavg", "--quiet", "--out", str(out), "-c"]
    config = ["dataset=fed-heart-disease", f"data-root={shared_data_root}", "num-server-rounds=1"]
    assert main([*argv, *config]) == 0
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    clients = {c["partition_id"]: c for c in rounds[-1]["clients"]}
    assert sorted(clients) == [0, 1, 2, 3]
    # Evaluated on FLamby's test splits: 104, 89, 16 and 45 samples.
    assert [clients[i]["num_examples"] for i in range(4)] == [104, 89, 16, 45]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["num-partitions"] == 4
