"""fairfl's own ServerApp writes the ledger; a resume rewrites the restored lines so it holds."""

import json

from fairfl.server.checkpoint import load_checkpoint
from fairfl.simulation import run_inprocess
from fairfl.telemetry.ledger import GENESIS, line_sha256, verify_ledger

SMALL = {"num-partitions": 3, "local-epochs": 1, "batch-size": 64}
#: The keys a line had before the ledger (fairfl report and the dashboard read them).
LINE_KEYS = {"run_id", "round", "wall_time", "clients", "metrics", "sampled", "evaluate_dropped"}
CLIENT_KEYS = {"node_id", "partition_id", "num_examples", "eval_acc", "eval_loss"}


def test_resume_continues_the_chain(tmp_path):
    config = {**SMALL, "out-dir": str(tmp_path)}
    run_inprocess({**config, "num-server-rounds": 2})
    before = (tmp_path / "rounds.jsonl").read_text().splitlines()
    assert verify_ledger(tmp_path).ok
    outcome = run_inprocess(
        {**config, "num-server-rounds": 3, "resume-from": str(tmp_path / "checkpoint.npz")}
    )
    after = (tmp_path / "rounds.jsonl").read_text().splitlines()
    assert after[:2] == before  # restored byte for byte
    lines = [json.loads(x) for x in after]
    assert [x["round"] for x in lines] == [1, 2, 3]
    assert lines[0]["prev_sha256"] == GENESIS
    assert lines[2]["prev_sha256"] == line_sha256(after[1])
    # every line carries the run's fingerprint, the one its checkpoint stores
    fingerprint = load_checkpoint(tmp_path / "checkpoint.npz").fingerprint["sha256"]
    assert {x["config_sha256"] for x in lines} == {fingerprint}
    report = verify_ledger(tmp_path)
    assert report.ok and report.rounds == 3
    head = outcome.summary["ledger"]
    assert (head["lines"], head["head_sha256"]) == (3, line_sha256(after[2]))
    for line in lines:
        assert LINE_KEYS | {"train", "prev_sha256", "config_sha256"} <= set(line)
        for client in line["clients"]:
            assert CLIENT_KEYS | {"client_key"} <= set(client)
            assert client["client_key"] == str(client["partition_id"])
