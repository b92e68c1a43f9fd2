"""RC-FL end to end through the in-process runner: ClientApp branch, η, results, resume."""

import json
import math
from collections import defaultdict

import numpy as np
import pytest

from fairfl.contract import keys
from fairfl.contract.keys import RCFL_ALPHA, RCFL_ETA
from fairfl.server.checkpoint import CHECKPOINT_FILE
from fairfl.simulation import run_inprocess

BASE = {"num-partitions": 4, "num-server-rounds": 2, "lr": 0.05, "seed": 1}


def recorder():
    seen = defaultdict(dict)

    def record(instruction, reply):
        config = instruction.content.config_records.get(keys.CONFIG)
        if config is not None and RCFL_ALPHA in config:
            metrics = reply.content.metric_records[keys.METRICS]
            seen[int(config["server-round"])][instruction.metadata.dst_node_id] = (
                dict(config),
                dict(metrics),
            )
        return reply

    return seen, record


def rounds_of(path):
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


def test_rcfl_trains_eta_and_writes_it_with_the_client_weights(tmp_path):
    seen, record = recorder()
    config = {**BASE, "strategy": "rcfl", "rcfl-alpha": 0.5, "rcfl-mu": 0.1}
    outcome = run_inprocess({**config, "out-dir": str(tmp_path)}, reply_filter=record)

    lines = rounds_of(tmp_path)
    assert [line["round"] for line in lines] == [1, 2]
    for line in lines:
        diagnostics = line["train"]["diagnostics"]
        weights = [w["weight"] for w in line["train"]["weights"]]
        assert len(weights) == 4 and sum(weights) == pytest.approx(1.0)
        assert len(diagnostics["rcfl-q"]) == 4
        assert all(0 < q < 2 for q in diagnostics["rcfl-q"].values())
        assert math.isfinite(diagnostics["rcfl-eta"])
    # Round 1 sends η₀ = 0; by default (no probe) η^1 is Algorithm 1's average of the
    # clients' η with the weights of ω; round 2 sends it to every client, which move it.
    assert {c[RCFL_ETA] for c, _ in seen[1].values()} == {0.0}
    assert "rcfl-probe" not in lines[0]["train"]["diagnostics"]
    eta_1 = lines[0]["train"]["diagnostics"]["rcfl-eta"]
    weights_1 = {w["node_id"]: w["weight"] for w in lines[0]["train"]["weights"]}
    average = sum(weights_1[node] * m[keys.RCFL_ETA] for node, (_, m) in seen[1].items())
    assert eta_1 == pytest.approx(average, rel=1e-12)
    assert {c[RCFL_ETA] for c, _ in seen[2].values()} == {eta_1}  # exact through JSON
    assert {c[RCFL_ALPHA] for c, _ in seen[2].values()} == {0.5}
    replied = [m[keys.RCFL_ETA] for _, m in seen[2].values()]
    assert all(eta != pytest.approx(eta_1) for eta in replied)
    assert outcome.strategy.eta == pytest.approx(lines[1]["train"]["diagnostics"]["rcfl-eta"])
    assert outcome.summary["strategy"] == "RC-FL"
    assert outcome.summary["final_metrics"]["num-clients"] == 4


def test_alpha_one_with_open_gates_ends_with_fedavgs_model(tmp_path):
    # α = 1 and η₀ ≪ every loss: every gate is exactly 1, so κ full-batch RC-FL steps
    # are FedAvg's κ full-batch epochs, and the p-weighted averages agree.
    rcfl = run_inprocess(
        {
            **BASE,
            "strategy": "rcfl",
            "rcfl-alpha": 1.0,
            "rcfl-eta-init": -1000.0,
            "rcfl-eta-probe": False,
            "rcfl-local-steps": 2,
            "rcfl-batch-size": 0,
            "out-dir": str(tmp_path / "rcfl"),
        }
    )
    fedavg = run_inprocess(
        {
            **BASE,
            "strategy": "fedavg",
            "local-epochs": 2,
            "batch-size": 100_000,
            "out-dir": str(tmp_path / "fedavg"),
        }
    )
    for key, array in fedavg.arrays.items():
        np.testing.assert_allclose(rcfl.arrays[key].numpy(), array.numpy(), rtol=1e-5, atol=1e-6)
    assert rcfl.strategy.eta == -1000.0


def test_with_replacement_sampling_end_to_end(tmp_path):
    config = {
        **BASE,
        "num-server-rounds": 3,
        "strategy": "rcfl",
        "fraction-train": 0.5,
        "rcfl-sampling": "with-replacement",
        "out-dir": str(tmp_path),
    }
    run_inprocess(config)
    lines = rounds_of(tmp_path)
    assert lines[0]["train"]["accepted"] == 4  # round 1 learns every n_i
    for line in lines[1:]:
        weights = [w["weight"] for w in line["train"]["weights"]]
        assert 1 <= len(weights) <= 2  # K = 2 draws
        assert sum(weights) == pytest.approx(1.0)
        assert all(w in (0.5, 1.0) for w in weights)  # count / K


class ServerCrashError(RuntimeError):
    pass


def test_resume_restores_eta_and_ends_with_the_uninterrupted_model(tmp_path):
    config = {
        **BASE,
        "num-server-rounds": 3,
        "strategy": "rcfl",
        "fraction-train": 0.5,
        "rcfl-sampling": "with-replacement",
    }
    whole = run_inprocess({**config, "out-dir": str(tmp_path / "whole")})

    def crash_in_round_3(instruction, reply):
        if int(instruction.content["config"]["server-round"]) == 3:
            raise ServerCrashError("killed in round 3")
        return reply

    crashed = tmp_path / "crashed"
    with pytest.raises(ServerCrashError, match="killed in round 3"):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round_3)
    resumed = run_inprocess(
        {**config, "out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)}
    )
    assert resumed.strategy.eta == whole.strategy.eta
    for key, array in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key].numpy(), array.numpy())
    assert rounds_of(crashed)[-1]["train"] == rounds_of(tmp_path / "whole")[-1]["train"]
