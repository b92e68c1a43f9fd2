"""register-supernodes.sh --registration writes the file the ServerApp reads (issue 35)."""

import os
import subprocess
import sys
from pathlib import Path

from fairfl.strategies.core.identity import key_fingerprint, load_registration

ROOT = Path(__file__).resolve().parents[2]


def _stand_ins(bin_dir: Path) -> None:
    """A stand-in flwr in ``bin_dir`` that accepts every registration."""
    bin_dir.mkdir(parents=True)
    (bin_dir / "flwr").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "flwr").chmod(0o755)


def _public_keys(folder: Path, *names: str) -> list[Path]:
    """SuperNode key pairs (EC P-384, OpenSSH) made with ssh-keygen; their .pub files."""
    for name in names:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", folder / name],
            check=True,
        )
    return [folder / f"{name}.pub" for name in names]


def test_the_registration_maps_each_keys_fingerprint_to_its_partition(tmp_path):
    _stand_ins(tmp_path / "venv" / "bin")  # first on PATH through FAIRFL_VENV
    keys = _public_keys(tmp_path, "device-a", "device-b")
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
    # --no-register (Kubernetes: the Job registers) writes the file and needs no flwr.
    only, script = tmp_path / "only.toml", ROOT / "deploy/scripts/register-supernodes.sh"
    written = subprocess.run(
        ["bash", script, "--no-register", "--registration", only, f"{keys[1]}=2"],
        env={**env, "FAIRFL_VENV": str(tmp_path / "no-venv"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert written.returncode == 0, written.stderr
    assert load_registration(only).partitions == {key_fingerprint(keys[1].read_bytes()): 2}


def test_the_compose_one_shot_writes_the_same_registration(tmp_path):
    """deploy/docker/register-supernodes.sh (POSIX sh, python from the flwr image)."""
    bin_dir = tmp_path / "bin"
    _stand_ins(bin_dir)
    (bin_dir / "python").symlink_to(sys.executable)  # the image's venv python
    keys = _public_keys(tmp_path, "supernode-1", "supernode-2")
    out = tmp_path / "registration" / "clients.toml"
    out.parent.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FLWR_HOME": str(tmp_path / "flwr")}
    script = ROOT / "deploy/docker/register-supernodes.sh"
    done = subprocess.run(
        ["sh", script, "--registration", out, "superlink:8000", "ca.crt"]
        + [f"{key}={partition}" for partition, key in enumerate(keys)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert load_registration(out).partitions == {
        key_fingerprint(keys[0].read_bytes()): 0,
        key_fingerprint(keys[1].read_bytes()): 1,
    }
    assert [p.name for p in out.parent.iterdir()] == ["clients.toml"]  # no .tmp left
    # A key without its partition is refused before anything is registered.
    refused = subprocess.run(
        ["sh", script, "--registration", out, "superlink:8000", "ca.crt", keys[0]],
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "PUBKEY=PARTITION" in refused.stderr
