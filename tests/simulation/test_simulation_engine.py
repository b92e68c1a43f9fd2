"""`flwr run .` through Flower's simulation engine agrees with the in-process runner."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fairfl.simulation import run_inprocess

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"num-partitions": 4, "num-server-rounds": 2, "lr": 0.1, "seed": 3}


def _toml_overrides(config: dict) -> str:
    return " ".join(
        f"{k}='{v}'"
        if isinstance(v, str)
        else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in config.items()
    )


@pytest.mark.integration
def test_flwr_run_matches_inprocess_runner(tmp_path, flwr_sim):
    sim_dir = tmp_path / "sim"
    flwr_sim(_toml_overrides({**CONFIG, "out-dir": str(sim_dir)}), 4, 900)
    lines = [json.loads(x) for x in (sim_dir / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [1, 2]
    summary = json.loads((sim_dir / "summary.json").read_text())
    assert summary["rounds"] == 2

    local = run_inprocess({**CONFIG, "out-dir": str(tmp_path / "local")})
    simulated = np.load(sim_dir / "final_model.npz")
    for key, array in local.arrays.items():
        # Node ids differ between runtimes, so the float64 sums run in another order.
        np.testing.assert_allclose(simulated[key], array.numpy(), rtol=0, atol=1e-6)
    by_partition = {c["partition_id"]: c["eval_acc"] for c in lines[-1]["clients"]}
    local_last = json.loads((tmp_path / "local" / "rounds.jsonl").read_text().splitlines()[-1])
    assert by_partition == {c["partition_id"]: c["eval_acc"] for c in local_last["clients"]}
    # The launcher stops what it started: nothing of ours keeps running.
    leftovers = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "flwr-home") not in leftovers


@pytest.mark.integration
@pytest.mark.parametrize("rule", ["qffl", "fedmgda", "equitable", "rcfl"])
def test_rule_runs_through_flwr_run(tmp_path, rule, flwr_sim):
    out_dir = tmp_path / "out"
    overrides = _toml_overrides(
        {"strategy": rule, "num-partitions": 3, "num-server-rounds": 2, "out-dir": str(out_dir)}
    )
    flwr_sim(overrides, supernodes=3, timeout=900)  # fails the test on a non-zero exit
    lines = [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [1, 2]
    for line in lines:
        assert line["train"]["accepted"] == 3 and line["train"]["dropped"] == {}
        assert len(line["train"]["weights"]) == 3
        assert len(line["clients"]) == 3
