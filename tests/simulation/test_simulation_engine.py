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
    assert summary["environment"]["ray_cluster"] == "local"  # a Ray of its own, said so

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
# Equitable FL and RC-FL run through the engine, every reply accepted, in
# tests/simulation/test_resume_engine.py (four rounds, and resumed).
@pytest.mark.parametrize("rule", ["qffl", "fedmgda"])
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


class _StartedError(Exception):
    """Raised by the stand-in for the SuperLink's start, with its environment."""


@pytest.mark.parametrize("ray_address", [None, "127.0.0.2:6379"])
def test_a_run_starts_its_own_ray_unless_given_a_cluster_and_says_which(
    tmp_path, monkeypatch, ray_address
):
    # Issue 47: with RAY_ADDRESS only removed, Flower's ray.init() attached to any
    # `ray start` cluster found through Ray's address file, and nothing recorded it.
    ray_services = pytest.importorskip("ray._private.services")
    from fairfl.simulation import engine

    def start(command, started, **options):
        raise _StartedError(options["env"])

    monkeypatch.setattr(engine, "_start", start)
    with pytest.raises(_StartedError) as superlink:
        engine.simulate(
            "",
            2,
            tmp_path / "home",
            app_dir=ROOT,
            summary_path=tmp_path / "out" / "s.json",
            ray_address=ray_address,
        )
    env = superlink.value.args[0]
    expected = ray_address or "local"
    assert env["RAY_ADDRESS"] == expected and env["FAIRFL_RAY_CLUSTER"] == expected
    # What Ray's ray.init() (no address, as Flower calls it) does with that environment
    # where a `ray start` cluster left its address file: starts its own (None) or
    # attaches to the given cluster, never the file's.
    ray_temp = tmp_path / "ray"
    ray_temp.mkdir()
    (ray_temp / "ray_current_cluster").write_text("127.0.0.9:6380")
    monkeypatch.setenv("RAY_ADDRESS", env["RAY_ADDRESS"])
    found = ray_services.canonicalize_bootstrap_address(None, str(ray_temp))
    assert found == (ray_address and ray_services.canonicalize_bootstrap_address(ray_address))
