"""docker-compose.yml brought up for real: 2 rounds across containers, TLS + auth on,
the SuperNodes behind the Fleet proxy (a SuperNode's container gets 403 for the Control
API and cannot resolve the SuperLink), every image non-root by itself, and host ports
published for the SuperLink and its Fleet proxy alone.

No image registry is reachable here, so the base images are stand-ins for the official
flwr images, built by ``deploy/docker/offline/build-offline-base.sh`` (Debian rootfs
from debootstrap + ``docker import``; flwr and fairfl's dependencies installed with
``pip --no-index`` from a wheelhouse made on this host). The project's own Dockerfiles
and compose file are then used unchanged, with the base images passed as build
arguments, on a private Docker engine this test starts and stops.

The build context is a copy of the files the images need (the repository root would
also send .venv to the engine); set FAIRFL_DOCKER_CACHE to keep the debootstrap
tarball, wheelhouse and saved base image elsewhere than <repo>/.docker-build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from docker_engine import DockerEngine, compose_command, why_no_engine

pytestmark = pytest.mark.deployment

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "deploy" / "scripts"
N_SUPERNODES = 3  # docker-compose.yml as committed
APP_UID = "49999:49999"  # the `app` user of the flwr images
CONTEXT_FILES = ["docker-compose.yml", "pyproject.toml", "README.md", "LICENSE"]
CONTEXT_DIRS = ["fairfl", "deploy"]


# Run in supernode-1's container: what it gets from the Control API through the proxy,
# and whether it can find the SuperLink itself.
DEVICE_PROBE = """
import http.client, json, socket, ssl
ctx = ssl.create_default_context(cafile="/run/secrets/ca.crt")
conn = http.client.HTTPSConnection("fleet-proxy", 9092, context=ctx, timeout=10)
conn.request("POST", "/v1/control/start-run", body=b"")
out = {"start-run": conn.getresponse().status}
try:
    socket.getaddrinfo("superlink", 8000)
    out["superlink"] = "resolved"
except socket.gaierror:
    out["superlink"] = "unresolved"
print(json.dumps(out))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stage_context(dest: Path) -> None:
    """Copy what the images and the compose file need (no .venv, no caches)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in CONTEXT_FILES:
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
    for name in CONTEXT_DIRS:
        shutil.copytree(REPO / name, dest / name, ignore=ignore)


def _flwr_env(ctx: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["FLWR_HOME"] = str(ctx / ".flwr-home")
    env["FAIRFL_PKI_DIR"] = str(ctx / ".flwr-home" / "pki")
    return env


@pytest.fixture(scope="module")
def engine():
    reason = why_no_engine()
    compose = compose_command()
    if reason is None and compose is None:
        reason = "neither docker-compose nor the docker compose plugin is installed"
    if reason is not None:
        pytest.skip(f"no Docker engine can be started here: {reason}")
    with DockerEngine() as eng:
        yield eng


def test_compose_federation_two_rounds(engine: DockerEngine, tmp_path: Path) -> None:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    compose = compose_command()
    assert compose is not None
    cache = Path(os.environ.get("FAIRFL_DOCKER_CACHE", REPO / ".docker-build"))

    # Base image: the stand-in for flwr/superlink, flwr/supernode and flwr/superexec.
    res = subprocess.run(
        ["bash", str(REPO / "deploy/docker/offline/build-offline-base.sh"), "--cache", str(cache)],
        env={**engine.env, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    base = res.stdout.strip().splitlines()[-1]
    timings["base image"] = time.monotonic() - t0

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    _stage_context(ctx)
    env = _flwr_env(ctx)
    pki = ctx / ".flwr-home" / "pki"
    subprocess.run(
        [
            "bash",
            str(SCRIPTS / "gen-certs.sh"),
            "--out",
            str(pki),
            "--san",
            "DNS:superlink",
            "--san",
            "DNS:fleet-proxy",
            "--supernodes",
            str(N_SUPERNODES),
            "--owner",
            APP_UID,
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    port = _free_port()
    subprocess.run(
        ["bash", str(SCRIPTS / "flwr-home.sh"), "--docker-port", str(port)],
        env=env,
        check=True,
        capture_output=True,
    )
    results = ctx / "outputs" / "docker"
    results.mkdir(parents=True)
    shutil.chown(results, user=49999, group=49999)

    tag = f"test-{uuid.uuid4().hex[:8]}"
    project = f"fairfltest{uuid.uuid4().hex[:6]}"
    compose_env = {
        **engine.env,
        "FAIRFL_IMAGE_TAG": tag,
        "FAIRFL_SUPERLINK_PORT": str(port),
        "FAIRFL_FLEET_PORT": str(_free_port()),
        "FAIRFL_SUPERLINK_BASE_IMAGE": base,
        "FAIRFL_SUPERNODE_BASE_IMAGE": base,
        "FAIRFL_SUPEREXEC_BASE_IMAGE": base,
        "FAIRFL_PROXY_BASE_IMAGE": base,  # has nginx-light (no apt in the build here)
        # Every dependency is in the base image: pip may not look anywhere else.
        "FAIRFL_PIP_INSTALL_ARGS": "--no-index --no-build-isolation",
    }
    dc = [*compose, "-p", project, "-f", str(ctx / "docker-compose.yml")]

    def run_dc(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*dc, *args],
            env=compose_env,
            cwd=ctx,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    try:
        res = run_dc("build")
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
        timings["compose build"] = time.monotonic() - t0 - sum(timings.values())
        res = run_dc("up", "-d")
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]

        # Wait until the SuperLink reports every SuperNode online.
        deadline = time.monotonic() + 180
        online = 0
        while time.monotonic() < deadline:
            listing = subprocess.run(
                ["flwr", "supernode", "list", "docker", "--format", "json"],
                env=env,
                capture_output=True,
                text=True,
                cwd=ctx,
            )
            try:
                nodes = json.loads(listing.stdout)["nodes"]
                online = sum(n["status"] == "online" for n in nodes)
            except (ValueError, KeyError):
                online = 0
            if online >= N_SUPERNODES:
                break
            time.sleep(2)
        assert online >= N_SUPERNODES, run_dc("logs", "--tail=40").stdout[-6000:]
        timings["compose up"] = time.monotonic() - t0 - sum(timings.values())

        # Every image runs as the unprivileged app user by itself (without compose's
        # `user:`), and only the SuperLink and its Fleet proxy publish a host port.
        for kind in ("superlink", "supernode", "superexec", "proxy"):
            image = f"fairfl/{kind}:{tag}"
            user = engine.docker("image", "inspect", "-f", "{{.Config.User}}", image)
            assert user.stdout.strip() == APP_UID, (image, user.stdout)
        uid = engine.docker(
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "id",
            f"fairfl/superexec:{tag}",
            "-u",
        )
        assert uid.stdout.strip() == APP_UID.split(":")[0], uid.stdout + uid.stderr
        service = '{{.Label "com.docker.compose.service"}}'
        ps = engine.docker(
            "ps",
            "--filter",
            f"label=com.docker.compose.project={project}",
            "--format",
            f"{service}\t{{{{.Ports}}}}",
        ).stdout
        published = {
            name for name, ports in (line.split("\t") for line in ps.splitlines()) if "->" in ports
        }
        assert published == {"superlink", "fleet-proxy"}, ps

        # A SuperNode's container reaches the Fleet API only: the proxy refuses the
        # Control API, and the SuperLink's own name does not resolve on its networks.
        res = run_dc("exec", "-T", "supernode-1", "python", "-c", DEVICE_PROBE, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads(res.stdout) == {"start-run": 403, "superlink": "unresolved"}

        # (d) submit 2 rounds from the host through the published, TLS-only port.
        run = subprocess.run(
            [
                "bash",
                str(SCRIPTS / "submit-run.sh"),
                "--connection",
                "docker",
                "--app",
                str(ctx),
                "--rounds",
                "2",
                "--out-dir",
                "/app/outputs/run1",
                "-c",
                # Replies bound to the node keys by the one-shot's client registration.
                f"num-partitions={N_SUPERNODES} min-available-nodes={N_SUPERNODES} "
                "client-registration='/app/registration/clients.toml'",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ctx,
        )
        timings["2 rounds"] = time.monotonic() - t0 - sum(timings.values())
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

        # Results landed in the bind-mounted volume on the host.
        rounds_file = results / "run1" / "rounds.jsonl"
        assert rounds_file.exists(), run.stdout[-4000:] + run_dc("logs", "--tail=60").stdout[-6000:]
        rounds = [json.loads(line) for line in rounds_file.read_text().splitlines() if line.strip()]
        assert [r["round"] for r in rounds] == [1, 2], (
            run.stdout[-4000:] + run_dc("logs", "--tail=60").stdout[-6000:]
        )
        for r in rounds:
            assert sorted(c["partition_id"] for c in r["clients"]) == list(range(N_SUPERNODES))
            assert r["train"]["accepted"] == N_SUPERNODES and not r["train"]["dropped"], r
        assert (results / "run1" / "summary.json").exists()
    finally:
        # The images stay: they go with the private engine's data root when the fixture
        # stops it (removing them layer by layer first took 55 s of a 311 s run).
        down = run_dc("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout=300)
        print(f"compose down: rc={down.returncode}")
        timings["down"] = time.monotonic() - t0 - sum(timings.values())
        print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    assert down.returncode == 0, down.stderr[-3000:]
    left = engine.docker("ps", "-aq").stdout.split()
    assert not left, f"containers left: {left}"
