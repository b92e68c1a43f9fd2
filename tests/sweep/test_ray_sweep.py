"""``fairfl compare --engine ray``'s driver side, without a cluster: address, resources and
how a finished task's run is admitted to the report (the cluster test is
``test_ray_cluster``)."""

from __future__ import annotations

import concurrent.futures as futures
import json
import sys

import pytest

from fairfl.sweep.compare import execute
from fairfl.sweep.ray_sweep import RaySweep, settle
from fairfl.sweep.worker import RunStatus


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


COMPARE = ["compare", "--rules", "fedavg", "--seeds", "1", "--engine", "ray"]


class _FakeRay:
    """Ray's driver calls RaySweep makes, on a cluster of two live nodes (1 and 2 CPUs)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def init(self, **kwargs):
        self.calls.append("init")

    def nodes(self):
        return [
            {
                "Alive": True,
                "NodeID": "a",
                "NodeManagerAddress": "10.0.0.1",
                "Resources": {"CPU": 1.0},
            },
            {
                "Alive": True,
                "NodeID": "b",
                "NodeManagerAddress": "10.0.0.2",
                "Resources": {"CPU": 2.0},
            },
            {
                "Alive": False,
                "NodeID": "c",
                "NodeManagerAddress": "10.0.0.3",
                "Resources": {"CPU": 64.0},
            },
        ]

    def remote(self, function):
        self.calls.append("remote")
        return function

    def shutdown(self):
        self.calls.append("shutdown")


def test_cpus_per_run_no_node_has_is_refused_before_submitting(tmp_path, monkeypatch, capsys):
    # Issue 47: Ray queued such tasks forever, its infeasible-task warning muted by the
    # driver's logging level, and `fairfl compare` hung without a word.
    from fairfl.cli import main
    from fairfl.simulation import ray_probe

    ray = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(ray_probe, "check_ray_address", lambda address: None)
    with pytest.raises(
        ValueError, match=r"--cpus-per-run 3 is more than any node .*at 127\.0\.0\.2:1"
    ) as refused:
        RaySweep("127.0.0.2:1", tmp_path, cpus_per_run=3)
    assert "10.0.0.1: 1, 10.0.0.2: 2)" in str(refused.value)  # the dead node's 64 do not count
    assert ray.calls == ["init", "shutdown"]  # nothing submitted, the driver let go
    ray.calls.clear()
    with RaySweep("127.0.0.2:1", tmp_path, cpus_per_run=2):  # the largest node holds it
        assert ray.calls == ["init", "remote"]
    out = tmp_path / "out"
    code = main(
        [*COMPARE, "--ray-address", "127.0.0.2:1", "--cpus-per-run", "4", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--cpus-per-run 4 is more than any node" in err
