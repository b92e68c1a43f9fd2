"""The deploy scripts bind replies to SuperNode keys by default (issue 47 items 2-3).

``register-supernodes.sh`` writes the client registration to ``$FAIRFL_PKI_DIR/
clients.toml`` unless told not to, with each partition's sample count when given the
run's data settings; ``submit-run.sh`` passes it (and ``node-auth = true``) to every run.
The deployment test starts a real federation with ``deploy/localfed.py`` (TLS, node
authentication, the scripts an operator runs), then a SuperNode that the operator let
connect but registered for no partition, configured with another device's partition:
its replies are dropped and the victim's weights equal the run's without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from localfed import LocalFederation, why_no_proxy

from fairfl.settings import RunSettings
from fairfl.strategies.core.identity import key_fingerprint, load_registration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/scripts/register-supernodes.sh"


def _keys(folder: Path, *names: str) -> list[Path]:
    """SuperNode key pairs (EC P-384, OpenSSH) made with ssh-keygen; their .pub files."""
    for name in names:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", folder / name],
            check=True,
        )
    return [folder / f"{name}.pub" for name in names]


def _register(tmp_path: Path, *args: object) -> subprocess.CompletedProcess:
    """register-supernodes.sh without a SuperLink (--no-register), PKI in tmp_path."""
    env = {
        **os.environ,
        "FAIRFL_VENV": str(Path(sys.executable).parent.parent),
        "FLWR_HOME": str(tmp_path),
        "FAIRFL_PKI_DIR": str(tmp_path / "pki"),
    }
    return subprocess.run(
        ["bash", SCRIPT, "--no-register", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_registration_is_written_by_default_with_the_partitions_counts(tmp_path):
    # supernode-K.pub is partition K - 1 (start-supernode.sh's default key for it).
    keys = _keys(tmp_path, "supernode-1", "supernode-3")
    data = "dataset='digits' num-partitions=3 seed=5"
    done = _register(tmp_path, "--run-config", data, *keys)
    assert done.returncode == 0, done.stderr
    registration = load_registration(tmp_path / "pki" / "clients.toml")
    assert registration.partitions == {
        key_fingerprint(keys[0].read_bytes()): 0,
        key_fingerprint(keys[1].read_bytes()): 2,
    }
    # The train-split sizes the SuperNodes' own cut of the data gives.
    from fairfl.data import partition_sizes

    settings = RunSettings.from_run_config({"num-partitions": 3, "seed": 5})
    sizes = partition_sizes(**settings.data_kwargs())
    assert registration.num_examples == {0: sizes[0], 2: sizes[2]}
    # Without --run-config the registration holds no counts (claims are then flagged).
    assert _register(tmp_path, *keys).returncode == 0
    assert load_registration(tmp_path / "pki" / "clients.toml").num_examples == {}


def test_a_key_of_no_known_partition_or_outside_the_data_is_refused(tmp_path):
    (device,) = _keys(tmp_path, "device-a")
    refused = _register(tmp_path, device)
    assert refused.returncode == 2 and "give" in refused.stderr
    assert "PUBKEY.pub=PARTITION (or --no-registration" in refused.stderr
    outside = _register(tmp_path, "--run-config", "num-partitions=2", f"{device}=2")
    assert outside.returncode == 2
    assert "partition 2 is outside num-partitions=2" in outside.stderr
    assert not (tmp_path / "pki" / "clients.toml").exists()


def _submitted_config(tmp_path: Path, *args: str) -> str:
    """The --run-config submit-run.sh gives flwr (a stand-in flwr prints its arguments)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "flwr").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "flwr").chmod(0o755)
    env = {**os.environ, "FAIRFL_VENV": str(bin_dir.parent), "FLWR_HOME": str(tmp_path)}
    env["FAIRFL_PKI_DIR"] = str(tmp_path / "pki")
    done = subprocess.run(
        ["bash", ROOT / "deploy/scripts/submit-run.sh", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    argv = done.stdout.splitlines()
    return argv[argv.index("--run-config") + 1] if "--run-config" in argv else ""


def test_submit_run_binds_every_authenticated_run_to_the_registration(tmp_path):
    pki = tmp_path / "pki"
    assert _submitted_config(tmp_path, "-c", "seed=3") == (
        f"seed=3 node-auth=true client-registration='{pki / 'clients.toml'}'"
    )
    # docker-compose's one-shot writes it where the ServerApp's container reads it.
    assert _submitted_config(tmp_path, "--connection", "docker") == (
        "node-auth=true client-registration='/app/registration/clients.toml'"
    )
    assert _submitted_config(tmp_path, "--registration", "/srv/c.toml").endswith(
        "client-registration='/srv/c.toml'"
    )
    assert _submitted_config(tmp_path, "--no-registration").endswith("client-registration='none'")
    # A key given with -c wins; the insecure local profile is not marked.
    given = "client-registration='/x.toml'"
    assert _submitted_config(tmp_path, "-c", given) == f"{given} node-auth=true"
    assert _submitted_config(tmp_path, "--connection", "local") == ""


N_SUPERNODES = 3
VICTIM = 1


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    """A federation of three SuperNodes (stopped by PID group at the end)."""
    reason = why_no_proxy()
    if reason is not None:
        pytest.skip(reason)
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    workdir = tmp_path_factory.mktemp("registration") / "fed"
    with LocalFederation(workdir, supernodes=N_SUPERNODES, network=network) as federation:
        yield federation


def _rounds(out_dir: Path) -> list[dict]:
    lines = (out_dir / "rounds.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _weights_by_partition(record: dict) -> dict[int, float]:
    return {w["partition_id"]: w["weight"] for w in record["train"]["weights"]}


@pytest.mark.deployment
def test_the_default_registration_refuses_an_impostor_supernode(fed: LocalFederation) -> None:
    # No client-registration in the run config: submit-run.sh passes the default one.
    overrides = {
        "strategy": "fedavg",
        "num-server-rounds": 2,
        "num-partitions": N_SUPERNODES,
        "min-available-nodes": N_SUPERNODES,
        "fraction-evaluate": 0.0,
        "seed": 7,
    }
    clean = fed.submit_run(overrides, name="clean", timeout=900)
    log = (fed.workdir / "logs" / "flwr-run-clean.log").read_text(errors="replace")
    assert clean.returncode == 0, log[-5000:]
    summary = json.loads((fed.out_dir("clean") / "summary.json").read_text())
    assert summary["config"]["client-registration"] == str(fed.registration), summary
    assert summary["config"]["node-auth"] is True

    fed.start_impostor(VICTIM)  # admitted by the SuperLink; configured as partition 1
    attacked = fed.submit_run(overrides, name="attacked", timeout=900)
    log = (fed.workdir / "logs" / "flwr-run-attacked.log").read_text(errors="replace")
    assert attacked.returncode == 0, log[-5000:]
    got, want = _rounds(fed.out_dir("attacked")), _rounds(fed.out_dir("clean"))
    assert [r["round"] for r in got] == [1, 2], log[-3000:]
    for g, w in zip(got, want, strict=True):
        reasons = list(g["train"]["dropped"].values())
        assert len(reasons) == 1, g["train"]
        assert f"claims client key '{VICTIM}'" in reasons[0], reasons
        assert f"is not in {fed.registration}" in reasons[0], reasons
        assert _weights_by_partition(g) == _weights_by_partition(w)
        assert _weights_by_partition(g)[VICTIM] > 0
    attacked_model = np.load(fed.out_dir("attacked") / "final_model.npz")
    clean_model = np.load(fed.out_dir("clean") / "final_model.npz")
    for key in clean_model.files:
        np.testing.assert_array_equal(attacked_model[key], clean_model[key])
