"""``fairfl compare --engine ray``'s driver side, without a cluster: address, resources and
how a finished task's run is admitted to the report (the cluster test is
``test_ray_cluster``)."""

from __future__ import annotations

import concurrent.futures as futures
import json

import pytest

from fairfl.report.compare import RunStatus, execute
from fairfl.report.ray_sweep import RaySweep, settle


def test_the_ray_engine_needs_an_address_and_positive_resources(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ValueError, match=r"--ray-address or \$RAY_ADDRESS"):
        RaySweep(None, tmp_path)
    with pytest.raises(ValueError, match="--cpus-per-run must be positive, got 0"):
        RaySweep("127.0.0.2:1", tmp_path, cpus_per_run=0)
    with pytest.raises(ValueError, match="retries must be >= 0"):
        RaySweep("127.0.0.2:1", tmp_path, retries=-1)
    with pytest.raises(ValueError, match="engine 'ray' needs a RaySweep"):
        execute([], engine="ray", progress=False)


def _run(tmp_path):
    out = tmp_path / "runs" / "fedavg" / "seed-1"
    out.mkdir(parents=True)
    return {"dir": "runs/fedavg/seed-1", "config": {"out-dir": str(out)}}, out


def _done(value=None, error=None):
    future: futures.Future = futures.Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_a_task_that_failed_every_retry_is_a_failed_run_with_its_reason(tmp_path):
    run, out = _run(tmp_path)
    status = settle(run, _done(error=RuntimeError("worker died")), 4.0)
    assert (status.status, status.wall_time) == ("failed", 4.0)
    assert "RuntimeError: worker died" in (out / "error.txt").read_text()


def test_a_run_enters_the_report_only_if_its_hash_chain_holds(tmp_path):
    run, out = _run(tmp_path)
    ok = RunStatus(run["dir"], "ok", 2.0)
    # no rounds.jsonl at all (the run's folder was lost)
    status = settle(run, _done(ok), 2.0)
    assert status.status == "failed" and "results do not verify" in status.error
    (out / "error.txt").unlink()
    # a line without the ledger's links: half-written or from elsewhere
    (out / "rounds.jsonl").write_text(json.dumps({"round": 1, "clients": []}) + "\n")
    status = settle(run, _done(ok), 2.0)
    assert status.status == "failed" and "results do not verify" in status.error
    assert "results do not verify" in (out / "error.txt").read_text()
