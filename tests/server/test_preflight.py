"""Every check runs before a run waits for SuperNodes or trains (fairfl.server.preflight)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from unittest.mock import Mock

import pytest
from flwr.serverapp import Grid

from fairfl.server.preflight import MissingExtraError, check_run
from fairfl.server.run import run_federation
from fairfl.simulation import run_inprocess
from fairfl.telemetry.ledger import verify_ledger

SMALL = {"num-partitions": 3, "local-epochs": 1, "batch-size": 64, "num-server-rounds": 2}


def _fails_before_the_grid(run_config: dict, match: str, error: type = ValueError) -> None:
    """The ServerApp's path raises ``match`` without one call to the Grid (no wait)."""
    grid = Mock(spec=Grid)
    with pytest.raises(error, match=match):
        run_federation(grid, run_config)
    assert grid.method_calls == []


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"seed": -1}, r"run config seed must be in \[0, 4294967295\].*got -1"),
        ({"seed": 2**40}, r"run config seed must be in \[0, 4294967295\].*got 1099511627776"),
        ({"dataset": "digits-foo"}, r"run config dataset must be one of .*got 'digits-foo'"),
        ({"out-dir": ""}, r"run config out-dir must be a folder, not empty"),
        # 1e6^52 = 1e312 > float64's 1.8e308: q <= 709.78 / ln(1e6) = 51.38
        (
            {"strategy": "qffl", "qffl-q": 1e308},
            r"run config qffl-q \(rule qffl\) must be <= 51.38",
        ),
        ({"strategy": "qfedsgd", "qffl-q": 52.0}, r"run config qffl-q \(rule qfedsgd\) must be"),
    ],
)
def test_bad_values_fail_at_start_naming_the_key(tmp_path, overrides, match):
    config = {"out-dir": str(tmp_path / "out"), **overrides}
    _fails_before_the_grid(config, match)


def test_qffl_q_within_float64_and_a_lower_max_loss_are_accepted(tmp_path):
    out = str(tmp_path / "out")
    check_run({"strategy": "qffl", "qffl-q": 51.0, "out-dir": out}, local_clients=False)
    # max-loss 10: q up to 709.78 / ln(10) = 308.25
    check_run(
        {"strategy": "qffl", "qffl-q": 300.0, "max-loss": 10.0, "out-dir": out},
        local_clients=False,
    )
    assert math.log(sys.float_info.max) / math.log(10.0) == pytest.approx(308.25, abs=0.01)


def test_missing_resume_from_fails_at_start_naming_the_key(tmp_path):
    missing = tmp_path / "nowhere" / "checkpoint.npz"
    _fails_before_the_grid(
        {"out-dir": str(tmp_path / "out"), "resume-from": str(missing)},
        r"run config resume-from: no checkpoint file at .*nowhere",
        FileNotFoundError,
    )


def test_too_many_partitions_fail_once_before_any_round(tmp_path, caplog):
    # digits has 1,797 samples: at most 1797 // 3 = 599 partitions of 3 samples.
    config = {"num-partitions": 5000, "out-dir": str(tmp_path / "out")}
    with pytest.raises(ValueError, match=r"run config num-partitions must be <= 599 .*got 5000"):
        check_run(config, local_clients=True)
    with pytest.raises(ValueError, match="num-partitions"):
        run_inprocess(config)
    assert not (tmp_path / "out" / "rounds.jsonl").exists()
    assert len(caplog.records) == 0  # one error, no per-client flood


def test_the_server_checks_bundled_partitions_once_the_supernodes_are_there():
    # In Flower's simulation the SuperNodes set num-partitions, so the ServerApp cuts
    # digits' partitions after its wait and before round 1, in one error.
    from fairfl.server.preflight import check_partitions
    from fairfl.settings import RunSettings

    with pytest.raises(ValueError, match=r"num-partitions must be <= 599"):
        check_partitions(RunSettings(num_partitions=700))


def test_synthetic_partitions_are_checked_without_drawing_every_device(monkeypatch):
    # n_k = floor(LogNormal(4, sigma)) + 50 >= 50 > 3 samples (2 train, 1 test) for every
    # device, so the check reads the arguments only: its cost must not grow with the
    # SuperNodes (bench_engine_scale: 10,000 size draws took seconds of a ServerApp).
    from fairfl.data import synthetic
    from fairfl.server.preflight import check_partitions
    from fairfl.settings import RunSettings

    def no_draws(*args):
        raise AssertionError("check_partitions drew a synthetic device")

    monkeypatch.setattr(synthetic, "_device_rng", no_draws)
    check_partitions(RunSettings(dataset="synthetic", partitioner="natural", num_partitions=10**6))
    with pytest.raises(ValueError, match=r"partitioner must be 'natural'"):
        check_partitions(RunSettings(dataset="synthetic", partitioner="iid", num_partitions=10))


def test_a_missing_extra_is_one_error_naming_it(tmp_path, monkeypatch):
    real = importlib.util.find_spec

    def without_datasets(name, *args):
        return None if name in ("datasets", "flwr_datasets") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_datasets)
    with pytest.raises(MissingExtraError) as error:
        run_inprocess({"out-dir": str(tmp_path / "out")})
    assert str(error.value) == (
        "run config partitioner='dirichlet' needs the Python module 'datasets', which is "
        'not installed: pip install "fairfl[data]"'
    )
    assert not (tmp_path / "out" / "rounds.jsonl").exists()


def test_a_missing_telemetry_extra_is_named(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a)
    )
    _fails_before_the_grid(
        {"telemetry": "wandb", "out-dir": str(tmp_path / "out")},
        r"telemetry='wandb' needs the Python module 'wandb'.*pip install \"fairfl\[telemetry\]\"",
    )


@pytest.fixture(scope="module")
def qffl_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("qffl") / "run"
    run_inprocess({**SMALL, "strategy": "qffl", "out-dir": str(out)})
    return out


def test_resume_with_the_defaulted_lr_set_explicitly_is_accepted(qffl_run, tmp_path):
    # q-FFL's fingerprint records the lr the clients are sent (0.1), not the rule's None.
    from fairfl.server.checkpoint import load_checkpoint

    checkpoint = qffl_run / "checkpoint.npz"
    assert load_checkpoint(checkpoint).fingerprint["config"]["lr"] == 0.1
    check_run(
        {
            **SMALL,
            "strategy": "qffl",
            "lr": 0.1,
            "num-server-rounds": 3,
            "out-dir": str(tmp_path / "resumed"),
            "resume-from": str(checkpoint),
        },
        local_clients=True,
    )


def test_summary_records_the_effective_config_and_versions(qffl_run):
    summary = json.loads((qffl_run / "summary.json").read_text())
    config = summary["config"]
    # defaults resolved, not only the keys given
    assert config["dataset"] == "digits" and config["model"] == "mlp"
    assert config["lr"] == 0.1 and config["seed"] == 0 and config["dirichlet-alpha"] == 0.3
    assert config["qffl-q"] == 0.1 and config["strategy"] == "qffl"
    assert summary["config_given"]["num-partitions"] == 3
    assert "dataset" not in summary["config_given"]
    versions = summary["environment"]["versions"]
    assert set(versions) == {"fairfl", "flwr", "torch", "numpy", "python"}
    assert versions["fairfl"] == "0.1.0" and all(versions.values())
    assert summary["environment"]["machine"]["cpu_count"] >= 1


def test_an_edited_summary_fails_verify(qffl_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(qffl_run, copy)
    assert verify_ledger(copy).ok
    path = copy / "summary.json"
    summary = json.loads(path.read_text())
    summary["final_metrics"]["acc-worst-10"] = 0.99
    path.write_text(json.dumps(summary, indent=2) + "\n")
    report = verify_ledger(copy)
    assert not report.ok
    assert "summary.json was edited after the run wrote it" in report.problem


def test_telemetry_sinks_get_the_effective_config(tmp_path, monkeypatch):
    import fairfl.server.results as results

    seen = []
    real = results.build_sinks

    def capture(settings, out_dir, *, run_id, run_config):
        seen.append(dict(run_config))
        return real(settings, out_dir, run_id=run_id, run_config=run_config)

    monkeypatch.setattr(results, "build_sinks", capture)
    run_inprocess({**SMALL, "num-server-rounds": 1, "out-dir": str(tmp_path / "out")})
    (params,) = seen
    assert (params["dataset"], params["model"], params["lr"], params["seed"]) == (
        "digits",
        "mlp",
        0.1,
        0,
    )
    assert params["dirichlet-alpha"] == 0.3 and params["num-partitions"] == 3


def test_the_servers_resume_check_leaves_num_partitions_to_the_supernodes(qffl_run, tmp_path):
    # On Flower's simulation engine the SuperNodes set num-partitions after the wait: the
    # up-front check takes the checkpoint's (3), the run compares again once they are there.
    from fairfl.server.checkpoint import FingerprintMismatchError

    config = {
        **SMALL,
        "strategy": "qffl",
        "num-partitions": 20,
        "num-server-rounds": 3,
        "out-dir": str(tmp_path / "resumed"),
        "resume-from": str(qffl_run / "checkpoint.npz"),
    }
    check_run(config, local_clients=False)
    with pytest.raises(FingerprintMismatchError, match="num-partitions"):
        check_run(config, local_clients=True)
    with pytest.raises(FingerprintMismatchError, match="qffl-q"):
        check_run({**config, "qffl-q": 0.5}, local_clients=False)
