"""A real federation across network addresses: TLS, SuperNode authentication, flwr run.

The server host (SuperLink on its loopback, the nginx Fleet proxy on its one address,
the operator's flwr CLI) runs in one network namespace, three SuperNodes in three
others, joined by a bridge in a namespace of its own (``deploy/localfed.py`` has the
layout); every process is started with the ``deploy/scripts`` an operator would use on
real hosts. One federation serves both tests (module fixture): first a device, holding
the CA certificate and a registered key, tries the Control and Runtime APIs and is
refused; then two rounds run with ``flwr run``, a SuperNode whose key was never
registered must be refused, and the result must match the in-process runner's for the
same seed. Where namespaces cannot be made (no root, no iproute2) the same tests run on
loopback and say so (set FAIRFL_DEPLOY_NETWORK=loopback to force that).
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from localfed import (
    EXIT_SUPERNODE_NOT_REGISTERED,
    PROBE_REQUESTS,
    LocalFederation,
    app_run_config,
    why_no_proxy,
)

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


def _node_ids(fed: LocalFederation) -> dict[str, str]:
    """Node id -> status of every SuperNode the SuperLink knows, asked by the operator."""
    res = fed.flwr_cli("supernode", "list", "tls", "--format", "json")
    return {n["node-id"]: n["status"] for n in json.loads(res.stdout)["nodes"]}


def _run_ids(fed: LocalFederation) -> list[str]:
    """Ids of every run the SuperLink knows, asked by the operator."""
    res = fed.flwr_cli("ls", "tls", "--format", "json")
    return [r["run-id"] for r in json.loads(res.stdout)["runs"]]


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    """One federation for this module's tests; stopped (again) at the end."""
    reason = why_no_proxy()
    if reason is not None:
        pytest.skip(reason)
    # FAIRFL_DEPLOY_NETWORK=loopback forces the fallback (netns: no fallback allowed).
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    workdir = tmp_path_factory.mktemp("netns") / "fed"
    with LocalFederation(workdir, supernodes=N_SUPERNODES, network=network) as federation:
        if federation.mode != "netns":
            msg = f"ran on loopback, not in network namespaces: {federation.fallback_reason}"
            warnings.warn(msg, stacklevel=1)
            print(msg)
        yield federation


def test_device_cannot_reach_control_api(fed: LocalFederation, record_property) -> None:
    """A device gets the Fleet API only: no run, no key (un)registered through it."""
    record_property("network", fed.mode)
    nodes_before = _node_ids(fed)
    assert list(nodes_before.values()) == ["online"] * N_SUPERNODES, nodes_before

    got = fed.probe_apis_from_device(0)
    # Fleet requests reach the SuperLink, which wants a signature (401); everything
    # else is the proxy's 403 (non-canonical paths get its 400: test_proxy_paths.py).
    want: dict[str, int | str] = {name: 403 for name in PROBE_REQUESTS}
    want["fleet-get-run"] = 401
    # In namespaces the SuperLink's own port is not open on the server's address.
    want["superlink-port"] = "refused" if fed.mode == "netns" else "n/a"
    assert got == want

    # The operator's commands, from the device, with a profile for the proxy.
    victim = next(iter(nodes_before))
    attempts = {
        "run": ("run", str(fed.app()), "tls", "--run-config", "num-server-rounds=1"),
        "register": (
            "supernode",
            "register",
            str(fed.pki / "supernodes" / "unregistered.pub"),
            "tls",
        ),
        "unregister": ("supernode", "unregister", victim, "tls"),
    }
    for what, args in attempts.items():
        res = fed.device_flwr_cli(*args, device=0)
        out = res.stdout + res.stderr
        assert res.returncode != 0, (what, out)
        assert "403 Forbidden" in out, (what, out)
    # Nothing changed on the SuperLink: same nodes, all online, and no run.
    assert _node_ids(fed) == nodes_before
    assert _run_ids(fed) == []


def test_federation_across_namespaces(fed: LocalFederation, tmp_path: Path) -> None:
    overrides = {
        "strategy": _strategy(),
        "num-server-rounds": ROUNDS,
        "num-partitions": N_SUPERNODES,
        "min-available-nodes": N_SUPERNODES,
        "seed": 7,
    }
    # TLS on the devices' side: our CA verifies the proxy (hostname/IP checked),
    # nothing else does, and plain HTTP is refused (nginx's 400).
    tls = fed.probe_tls()
    assert tls["with_ca"].startswith("TLS"), tls
    assert tls["system_cas"].startswith("refused"), tls
    assert tls["plain_http"].startswith("HTTP/1.1 400 "), tls

    # (d) two rounds through `flwr run`, by the operator on the server host, each reply
    # checked against the operator's registration (key fingerprint -> partition id).
    registered_run = {**overrides, "client-registration": str(fed.registration)}
    run = fed.submit_run(registered_run, name="deploy", timeout=900)
    log = (fed.workdir / "logs" / "flwr-run-deploy.log").read_text(errors="replace")
    assert run.returncode == 0, log[-5000:]
    rounds = _rounds(fed.out_dir("deploy"))
    assert [r["round"] for r in rounds] == list(range(1, ROUNDS + 1)), log[-3000:]
    for record in rounds:
        assert sorted(_by_partition(record)) == list(range(N_SUPERNODES))
    summary = json.loads((fed.out_dir("deploy") / "summary.json").read_text())
    assert summary["final_metrics"]["num-clients"] == N_SUPERNODES
    # With node authentication, every client entry names the SuperNode by the fingerprint
    # of the public key the operator registered for it (fairfl.telemetry.nodes).
    from flwr.cli.supernode.register import try_load_public_key

    from fairfl.telemetry.nodes import public_key_fingerprint

    registered = {
        public_key_fingerprint(try_load_public_key(fed.pki / "supernodes" / f"supernode-{i}.pub"))
        for i in range(1, N_SUPERNODES + 1)
    }
    for record in rounds:
        assert {c.get("node_key") for c in record["clients"]} == registered, record["clients"]

    # Impostors: a registration that gives SuperNodes 1 and 2 each other's partition.
    # Both replies claim a partition their key is not registered for and are dropped,
    # naming node and key; SuperNode 3 trains alone.
    swapped = fed.workdir / "swapped-registration.toml"
    lines = fed.registration.read_text().splitlines()
    first, second = (i for i, line in enumerate(lines) if line.endswith((" = 0", " = 1")))
    lines[first], lines[second] = (
        lines[first].replace(" = 0", " = 1"),
        lines[second].replace(" = 1", " = 0"),
    )
    swapped.write_text("\n".join(lines) + "\n")
    impostors = {**overrides, "num-server-rounds": 1, "client-registration": str(swapped)}
    run = fed.submit_run(impostors, name="impostors", timeout=600)
    log = (fed.workdir / "logs" / "flwr-run-impostors.log").read_text(errors="replace")
    assert run.returncode == 0, log[-5000:]
    (train,) = (r["train"] for r in _rounds(fed.out_dir("impostors")))
    assert [w["partition_id"] for w in train["weights"]] == [2], train
    reasons = list(train["dropped"].values())
    assert len(reasons) == 2, train
    for partition, registered_for in ((0, 1), (1, 0)):
        claim = f"claims client key '{partition}'"
        assert any(
            claim in r and f"registered for partition {registered_for}" in r for r in reasons
        ), reasons

    # A SuperNode with an unregistered key is refused and never joins.
    code, node_log = fed.try_unregistered_supernode()
    assert code is not None and code != 0, node_log
    assert f"Exit Code: {EXIT_SUPERNODE_NOT_REGISTERED}" in node_log, node_log
    status = fed.node_status()
    assert len(status) == N_SUPERNODES and status.count("online") == N_SUPERNODES, status
    # The operator's two runs are the only ones (the device's attempts added none).
    assert len(_run_ids(fed)) == 2
    namespaces = list(fed.namespaces)
    pids = [p.popen.pid for p in fed.procs]
    fed.stop()  # the fixture stops it again: a no-op

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
