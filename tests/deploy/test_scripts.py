"""deploy/scripts: keys Flower accepts, certificates with the right names, profiles Flower
reads, and the exact flags the start/submit scripts hand to Flower (checked with stub
commands, so nothing is started)."""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

pytestmark = pytest.mark.deployment

SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "scripts"
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
needs_nginx = pytest.mark.skipif(
    shutil.which("nginx") is None, reason="nginx not installed (apt-get install nginx-light)"
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["FLWR_HOME"] = str(tmp_path / "home")
    env["FAIRFL_PKI_DIR"] = str(tmp_path / "home" / "pki")
    env.update(extra)
    return env


def _run(script: str, *args: str, env: dict[str, str], check: bool = True):
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


def _stub_venv(tmp_path: Path, *commands: str) -> Path:
    """A fake venv whose commands print their arguments as JSON instead of running."""
    venv = tmp_path / "stubvenv"
    (venv / "bin").mkdir(parents=True)
    for name in commands:
        path = venv / "bin" / name
        path.write_text(
            f"#!{sys.executable}\nimport json, sys\nprint(json.dumps([{name!r}] + sys.argv[1:]))\n"
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return venv


@needs_openssl
def test_gen_certs(tmp_path: Path) -> None:
    env = _env(tmp_path)
    pki = tmp_path / "pki"
    _run(
        "gen-certs.sh",
        "--out",
        str(pki),
        "--san",
        "DNS:superlink",
        "--san",
        "10.203.0.1",
        "--supernodes",
        "2",
        env=env,
    )
    cert = x509.load_pem_x509_certificate((pki / "superlink.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "superlink"} <= set(sans.get_values_for_type(x509.DNSName))
    ips = set(sans.get_values_for_type(x509.IPAddress))
    assert {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.203.0.1")} <= ips
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    # Private keys are owner-only; public parts readable.
    for private in ("ca.key", "superlink.key", "supernodes/supernode-1", "superexec.secret"):
        assert stat.S_IMODE((pki / private).stat().st_mode) == 0o600, private
    # Each SuperNode has its own SuperExec secret, unlike the SuperLink's.
    node_secrets = [(pki / f"supernodes/supernode-{k}.superexec.secret") for k in (1, 2)]
    for secret in node_secrets:
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
        assert len(secret.read_text()) == 64
    values = {s.read_bytes() for s in [*node_secrets, pki / "superexec.secret"]}
    assert len(values) == 3
    assert stat.S_IMODE((pki / "ca.crt").stat().st_mode) == 0o644

    # Re-running keeps the CA and the SuperNode keys, and reissues the server certificate.
    ca_before = (pki / "ca.crt").read_bytes()
    key_before = (pki / "supernodes" / "supernode-1").read_bytes()
    _run("gen-certs.sh", "--out", str(pki), "--san", "DNS:other", "--supernodes", "2", env=env)
    assert (pki / "ca.crt").read_bytes() == ca_before
    assert (pki / "supernodes" / "supernode-1").read_bytes() == key_before
    assert {s.read_bytes() for s in node_secrets} <= values
    cert2 = x509.load_pem_x509_certificate((pki / "superlink.crt").read_bytes())
    sans2 = cert2.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "other" in sans2.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize("keygen", ["ssh-keygen", "python"])
def test_supernode_keys_are_what_flower_accepts(tmp_path: Path, keygen: str) -> None:
    if keygen == "ssh-keygen" and shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    env = _env(tmp_path, FAIRFL_KEYGEN=keygen)
    _run("gen-supernode-key.sh", "--out", str(tmp_path / "k"), "dev-1", env=env)
    private = load_ssh_private_key((tmp_path / "k" / "dev-1").read_bytes(), None)
    public = load_ssh_public_key((tmp_path / "k" / "dev-1.pub").read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert isinstance(private.curve, ec.SECP384R1)
    assert public.public_numbers() == private.public_key().public_numbers()
    # What `flwr supernode register` runs on the public key file.
    from flwr.cli.supernode.register import try_load_public_key

    assert try_load_public_key(tmp_path / "k" / "dev-1.pub")
    # An existing key is kept unless --force.
    before = (tmp_path / "k" / "dev-1").read_bytes()
    _run("gen-supernode-key.sh", "--out", str(tmp_path / "k"), "dev-1", env=env)
    assert (tmp_path / "k" / "dev-1").read_bytes() == before


def test_connection_profiles_are_read_by_flower(tmp_path: Path) -> None:
    env = _env(tmp_path)
    _run(
        "flwr-home.sh",
        "--superlink",
        "fl.example.org:8000",
        "--ca",
        str(tmp_path / "ca.crt"),
        "--docker-port",
        "18000",
        env=env,
    )
    res = subprocess.run(
        ["flwr", "config", "list", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    listed = json.loads(res.stdout)
    assert listed["superlink"] == ["simulation", "local", "tls", "docker"]
    assert listed["default"] == "simulation"
    import tomllib

    config = tomllib.loads((tmp_path / "home" / "config.toml").read_text())["superlink"]
    assert config["tls"] == {
        "address": "fl.example.org:8000",
        "root-certificates": str(tmp_path / "ca.crt"),
    }
    assert config["docker"]["address"] == "127.0.0.1:18000"
    assert config["simulation"]["address"] == ":local:"


@needs_openssl
def test_start_scripts_pass_tls_auth_and_node_config(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path, "flower-superlink", "flower-supernode", "flower-superexec", "flwr")
    env = _env(tmp_path, FAIRFL_VENV=str(venv))
    pki = tmp_path / "home" / "pki"
    _run("gen-certs.sh", "--supernodes", "1", env=env)

    link = json.loads(_run("start-superlink.sh", "--port", "18300", env=env).stdout)
    assert link[0] == "flower-superlink"
    for flag, value in [
        ("--ssl-certfile", pki / "superlink.crt"),
        ("--ssl-keyfile", pki / "superlink.key"),
        ("--ssl-ca-certfile", pki / "ca.crt"),
        ("--port", "18300"),
        ("--host", "127.0.0.1"),
        ("--isolation", "subprocess"),
        ("--database", tmp_path / "home" / "superlink" / "state.db"),
    ]:
        assert link[link.index(flag) + 1] == str(value), flag
    assert "--enable-supernode-auth" in link and "--insecure" not in link
    assert "--disable-runtime-dependency-installation" in link
    # flwr ignores a SuperExec secret in subprocess isolation: none is passed there.
    assert "--superexec-auth-secret-file" not in link
    insecure = json.loads(_run("start-superlink.sh", "--insecure", env=env).stdout)
    assert "--insecure" in insecure and "--enable-supernode-auth" not in insecure

    node = json.loads(
        _run(
            "start-supernode.sh",
            "--superlink",
            "10.0.0.1:8000",
            "--partition-id",
            "1",
            "--num-partitions",
            "3",
            "--device",
            "cuda",
            "--data-root",
            "/data x",
            "--ditto-state-dir",
            "/var/lib/fairfl/ditto",
            "--secagg-state-dir",
            "/var/lib/fairfl/secagg",
            "--key",
            str(pki / "supernodes" / "supernode-1"),
            env=env,
        ).stdout
    )
    config = dict(kv.split("=", 1) for kv in shlex.split(node[node.index("--node-config") + 1]))
    assert config == {
        "partition-id": "1",
        "num-partitions": "3",
        "data-root": "/data x",
        "device": "cuda",
        "ditto-state-dir": "/var/lib/fairfl/ditto",
        "secagg-state-dir": "/var/lib/fairfl/secagg",
    }
    assert node[node.index("--root-certificates") + 1] == str(pki / "ca.crt")
    assert node[node.index("--auth-supernode-private-key") + 1] == str(
        pki / "supernodes" / "supernode-1"
    )
    bad = _run(
        "start-supernode.sh",
        "--superlink",
        "x:1",
        "--partition-id",
        "3",
        "--num-partitions",
        "3",
        env=env,
        check=False,
    )
    assert bad.returncode == 2 and "partition-id" in bad.stderr

    run = json.loads(
        _run(
            "submit-run.sh",
            "--connection",
            "tls",
            "--strategy",
            "semivred",
            "--rounds",
            "5",
            "--out-dir",
            "/srv/r1",
            "-c",
            "seed=3",
            env=env,
        ).stdout
    )
    assert run[:4] == ["flwr", "run", str(SCRIPTS.parents[1]), "tls"]
    assert "--stream" in run
    # Registration by default (issue 47): the run is marked node-auth and bound to the
    # client registration register-supernodes.sh writes.
    assert run[run.index("--run-config") + 1] == (
        "strategy='semivred' num-server-rounds=5 out-dir='/srv/r1' seed=3 node-auth=true "
        f"client-registration='{pki / 'clients.toml'}'"
    )


@needs_openssl
def test_superexec_secret_is_on_by_default_one_per_process(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path, "flower-superlink", "flower-supernode", "flower-superexec")
    env = _env(tmp_path, FAIRFL_VENV=str(venv))
    pki = tmp_path / "home" / "pki"
    _run("gen-certs.sh", "--supernodes", "2", env=env)

    def flag(argv: list[str], name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    secret = "--superexec-auth-secret-file"
    link = json.loads(_run("start-superlink.sh", "--isolation", "process", env=env).stdout)
    assert flag(link, secret) == str(pki / "superexec.secret")
    node_args = ["--superlink", "x:9092", "--num-partitions", "2", "--isolation", "process"]
    nodes = [
        json.loads(_run("start-supernode.sh", *node_args, "--partition-id", p, env=env).stdout)
        for p in ("0", "1")
    ]
    assert [flag(n, secret) for n in nodes] == [
        str(pki / "supernodes" / f"supernode-{k}.superexec.secret") for k in (1, 2)
    ]
    off = json.loads(
        _run(
            "start-superlink.sh", "--isolation", "process", "--no-superexec-secret", env=env
        ).stdout
    )
    assert secret not in off
    # A SuperExec must be given its verifier's secret, or be told there is none.
    exe = ["--runtime-api", "127.0.0.1:8000", "--ca", str(pki / "ca.crt")]
    missing = _run("start-superexec.sh", *exe, env=env, check=False)
    assert missing.returncode == 2 and "--secret" in missing.stderr
    given = json.loads(
        _run("start-superexec.sh", *exe, "--secret", str(pki / "superexec.secret"), env=env).stdout
    )
    assert flag(given, secret) == str(pki / "superexec.secret")
    assert secret not in json.loads(_run("start-superexec.sh", *exe, "--no-secret", env=env).stdout)
    # A SuperLink in process isolation without its secret file refuses to start.
    (pki / "superexec.secret").unlink()
    refused = _run("start-superlink.sh", "--isolation", "process", env=env, check=False)
    assert refused.returncode == 2 and "superexec.secret" in refused.stderr


@needs_openssl
@needs_nginx
def test_proxy_config_forwards_only_fleet_methods(tmp_path: Path) -> None:
    env = _env(tmp_path)
    pki = tmp_path / "home" / "pki"
    _run("gen-certs.sh", env=env)
    run_dir = tmp_path / "proxy"
    # `nginx -t` binds the listen address: a free loopback port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{sock.getsockname()[1]}"
    args = ["--listen", listen, "--superlink", "127.0.0.1:18000", "--run-dir"]
    checked = _run("start-proxy.sh", *args, str(run_dir), "--check", env=env, check=False)
    assert checked.returncode == 0, checked.stderr  # `nginx -t` accepts it
    conf = (run_dir / "nginx.conf").read_text()
    directives = [line for line in conf.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in directives if "@" in line]  # every placeholder filled
    assert f"listen {listen} ssl;" in conf
    assert "server 127.0.0.1:18000;" in conf
    assert f"proxy_ssl_trusted_certificate {pki / 'ca.crt'};" in conf
    assert "proxy_ssl_verify on;" in conf
    # Exactly two locations: the Fleet methods (POST only) and a 403 for the rest.
    locations = [line.strip() for line in conf.splitlines() if line.strip().startswith("location")]
    assert locations == ["location ~ ^/v1/fleet/[a-z-]+$ {", "location / {"]
    assert "return 403" in conf.split("location / {")[1]
    assert "limit_except POST" in conf.split("location / {")[0]
    # Values that could end an nginx directive are refused.
    bad = _run("start-proxy.sh", "--listen", "0.0.0.0:1; include /etc/x", env=env, check=False)
    assert bad.returncode == 2 and "unsafe" in bad.stderr
