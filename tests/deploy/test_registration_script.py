"""register-supernodes.sh --registration writes the file the ServerApp reads (issue 35)."""

import os
import subprocess
from pathlib import Path

from fairfl.strategies.identity import key_fingerprint, load_registration

ROOT = Path(__file__).resolve().parents[2]


def test_the_registration_maps_each_keys_fingerprint_to_its_partition(tmp_path):
    # A stand-in flwr (first on PATH through FAIRFL_VENV) accepts every registration.
    fake = tmp_path / "venv" / "bin"
    fake.mkdir(parents=True)
    (fake / "flwr").write_text("#!/bin/sh\nexit 0\n")
    (fake / "flwr").chmod(0o755)
    keys = []
    for name in ("device-a", "device-b"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", tmp_path / name],
            check=True,
        )
        keys.append(tmp_path / f"{name}.pub")
    out = tmp_path / "clients.toml"
    env = {**os.environ, "FAIRFL_VENV": str(tmp_path / "venv"), "FLWR_HOME": str(tmp_path)}
    subprocess.run(
        [
            "bash",
            ROOT / "deploy/scripts/register-supernodes.sh",
            "--registration",
            out,
            f"{keys[0]}=3",
            f"{keys[1]}=0",
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    registration = load_registration(out)
    assert registration.partitions == {
        key_fingerprint(keys[0].read_bytes()): 3,
        key_fingerprint(keys[1].read_bytes()): 0,
    }
    # A key without its partition is refused before anything is registered.
    refused = subprocess.run(
        ["bash", ROOT / "deploy/scripts/register-supernodes.sh", "--registration", out, keys[0]],
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "PUBKEY.pub=PARTITION" in refused.stderr
