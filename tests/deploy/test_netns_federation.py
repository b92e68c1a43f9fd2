"""A real federation across network addresses: TLS, SuperNode authentication, flwr run.

The SuperLink runs in one network namespace, three SuperNodes in three others and the
flwr CLI in a fifth, joined by a bridge in a namespace of its own (``deploy/localfed.py``
has the layout); every process is started with the ``deploy/scripts`` an operator would
use on real hosts. Two rounds run with ``flwr run``; then a SuperNode whose key was never
registered must be refused, and the result must match the in-process runner's for the
same seed. Where namespaces cannot be made (no root, no iproute2) the same test runs on
loopback and says so (set FAIRFL_DEPLOY_NETWORK=loopback to force that).
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from localfed import EXIT_SUPERNODE_NOT_REGISTERED, LocalFederation, app_run_config

pytestmark = pytest.mark.deployment

N_SUPERNODES = 3
ROUNDS = 2


def _strategy() -> str:
    """Semi-VRed once it is registered, FedAvg until then."""
    from fairfl.strategies.registry import STRATEGIES

    return "semivred" if "semivred" in STRATEGIES else "fedavg"


def _rounds(out_dir: Path) -> list[dict]:
    lines = (out_dir / "rounds.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _by_partition(record: dict) -> dict[int, dict]:
    return {c["partition_id"]: c for c in record["clients"]}


def test_federation_across_namespaces(tmp_path: Path, record_property) -> None:
    overrides = {
        "strategy": _strategy(),
        "num-server-rounds": ROUNDS,
        "num-partitions": N_SUPERNODES,
        "min-available-nodes": N_SUPERNODES,
        "seed": 7,
    }
    # FAIRFL_DEPLOY_NETWORK=loopback forces the fallback (netns: no fallback allowed).
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    fed = LocalFederation(tmp_path / "fed", supernodes=N_SUPERNODES, network=network)
    with fed:
        record_property("network", fed.mode)
        if fed.mode != "netns":
            msg = f"ran on loopback, not in network namespaces: {fed.fallback_reason}"
            warnings.warn(msg, stacklevel=1)
            print(msg)
        else:
            print(f"SuperLink at {fed.superlink_addr} in namespace {fed.tag}-link")

        # TLS: our CA verifies the SuperLink (hostname/IP checked), nothing else does,
        # and plain HTTP gets no HTTP answer.
        tls = fed.probe_tls()
        assert tls["with_ca"].startswith("TLS"), tls
        assert tls["system_cas"].startswith("refused"), tls
        assert not tls["plain_http"].startswith("HTTP/"), tls

        # (d) two rounds through `flwr run` from the operator's namespace.
        run = fed.submit_run(overrides, name="deploy", timeout=900)
        log = (fed.workdir / "logs" / "flwr-run-deploy.log").read_text(errors="replace")
        assert run.returncode == 0, log[-5000:]
        rounds = _rounds(fed.out_dir("deploy"))
        assert [r["round"] for r in rounds] == list(range(1, ROUNDS + 1)), log[-3000:]
        for record in rounds:
            assert sorted(_by_partition(record)) == list(range(N_SUPERNODES))
        summary = json.loads((fed.out_dir("deploy") / "summary.json").read_text())
        assert summary["final_metrics"]["num-clients"] == N_SUPERNODES

        # A SuperNode with an unregistered key is refused and never joins.
        code, node_log = fed.try_unregistered_supernode()
        assert code is not None and code != 0, node_log
        assert f"Exit Code: {EXIT_SUPERNODE_NOT_REGISTERED}" in node_log, node_log
        status = fed.node_status()
        assert len(status) == N_SUPERNODES and status.count("online") == N_SUPERNODES, status
        namespaces = list(fed.namespaces)
        pids = [p.popen.pid for p in fed.procs]

    # Everything we made is gone.
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in namespaces if ns in listed.split()], listed
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)

    # Same seed, same rule, in process: the same federation result.
    from fairfl.simulation import run_inprocess

    inproc_dir = tmp_path / "inprocess"
    config = app_run_config({**overrides, "out-dir": str(inproc_dir)})
    nodes = {
        1001 + p: {"partition-id": p, "num-partitions": N_SUPERNODES, "device": "cpu"}
        for p in range(N_SUPERNODES)
    }
    run_inprocess(config, node_configs=nodes)
    expected = _rounds(inproc_dir)
    assert len(expected) == len(rounds)
    for got, want in zip(rounds, expected, strict=True):
        g, w = _by_partition(got), _by_partition(want)
        for p in range(N_SUPERNODES):
            assert g[p]["num_examples"] == w[p]["num_examples"]
            assert g[p]["eval_acc"] == w[p]["eval_acc"]
            assert g[p]["eval_loss"] == pytest.approx(w[p]["eval_loss"], rel=1e-6)
    # Final global model. Bit-identical today (the strategies aggregate in a fixed order);
    # the tolerance only admits float summation-order effects, see deploy/README.md.
    deployed = np.load(fed.out_dir("deploy") / "final_model.npz")
    local = np.load(inproc_dir / "final_model.npz")
    assert sorted(deployed.files) == sorted(local.files)
    identical = all(np.array_equal(deployed[k], local[k]) for k in local.files)
    print(f"deployment vs in-process final model: {'bit-identical' if identical else 'close'}")
    for key in local.files:
        np.testing.assert_allclose(deployed[key], local[key], rtol=1e-6, atol=1e-7)
