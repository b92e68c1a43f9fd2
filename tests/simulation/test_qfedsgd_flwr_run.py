"""`flwr run .` with strategy='qfedsgd': fairfl's ClientApp sends gradients, the run finishes.

Reuses the plain `flwr run .` test's fresh FLWR_HOME fixture (it stops every process
naming that FLWR_HOME by PID at teardown) and its `flwr run` helper.
"""

from __future__ import annotations

import json

import pytest

from tests.simulation import test_flwr_run_plain as plain

flower = plain.flower


@pytest.mark.integration
def test_flwr_run_with_qfedsgd_writes_rounds_and_summary(flower, tmp_path):
    _, env = flower
    out = tmp_path / "out"
    log = tmp_path / "flwr.log"
    completed = plain.flwr_run(
        env, f"num-server-rounds=2 strategy='qfedsgd' qffl-q=1.0 out-dir='{out}'", log
    )
    text = log.read_text(errors="replace")
    assert completed.returncode == 0, text[-5000:]
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2]
    for record in rounds:  # both SuperNodes' gradients were accepted every round
        assert record["train"]["accepted"] == 2 and record["train"]["dropped"] == {}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2
    assert summary["strategy"] == "q-FedSGD"
    assert summary["strategy_settings"]["q"] == 1.0
