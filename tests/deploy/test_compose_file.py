"""docker-compose.yml: valid against the Compose Specification's JSON schema, in sync
with its generator, wired as issue 7 asks (TLS, authentication, one partition and one
key per SuperNode, results on a volume, GPU override) and hardened as issue 21 asks
(non-root, no capabilities, no-new-privileges, read-only root with a tmpfs /tmp,
memory/CPU/PID limits, Runtime APIs off the shared network, one SuperExec secret per
SuperLink/SuperNode, SuperNodes reaching only the Fleet proxy). Static checks of the
files: no Docker engine needed (the ``docker-compose config`` test needs only the
docker-compose program)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "deploy" / "schemas" / "compose-spec.json"
COMPOSE = REPO / "docker-compose.yml"
GPU = REPO / "deploy" / "docker" / "docker-compose.gpu.yml"


APP_UID = 49999
SIZES = [1, 3, 10]


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "compose_gen", REPO / "deploy/docker/compose_gen.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flag(cmd: list[str], name: str) -> str:
    """The value of ``name`` in a command given as ``--name value`` or ``--name=value``."""
    for i, arg in enumerate(cmd):
        if arg == name:
            return cmd[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise KeyError(name)


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    # The file declares draft 2019-09 under a URI jsonschema does not know by that name.
    return jsonschema.Draft201909Validator(schema)


@pytest.mark.parametrize("path", [COMPOSE, GPU], ids=["compose", "gpu-override"])
def test_valid_against_compose_spec_schema(path: Path) -> None:
    errors = sorted(_validator().iter_errors(yaml.safe_load(path.read_text())), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_rejects_a_broken_file() -> None:
    broken = {"services": {"superlink": {"image": 3, "commandd": ["x"]}}}
    assert len(list(_validator().iter_errors(broken))) >= 2


def test_committed_files_are_the_generators_output() -> None:
    gen = _gen()
    assert COMPOSE.read_text() == gen.compose(3), "regenerate: compose_gen.py --supernodes 3"
    assert GPU.read_text() == gen.gpu_override(3, 1), "regenerate the GPU override"


@pytest.mark.parametrize("n", [1, 3, 10])
def test_generated_for_n_supernodes(n: int) -> None:
    gen = _gen()
    for text in (gen.compose(n), gen.gpu_override(n, 2)):
        assert not list(_validator().iter_errors(yaml.safe_load(text)))
    services = yaml.safe_load(gen.compose(n))["services"]
    partitions = []
    for k in range(1, n + 1):
        cmd = services[f"supernode-{k}"]["command"]
        node_config = dict(
            item.split("=", 1) for item in shlex.split(cmd[cmd.index("--node-config") + 1])
        )
        partitions.append(int(node_config["partition-id"]))
        assert node_config["num-partitions"] == str(n)
        assert cmd[cmd.index("--auth-supernode-private-key") + 1] == f"/run/secrets/supernode-{k}"
        # Each SuperNode sees only its own private key.
        keys = [s for s in services[f"supernode-{k}"]["secrets"] if s.startswith("supernode-")]
        assert keys == [f"supernode-{k}", f"supernode-{k}.superexec.secret"]
        clientapp = services[f"superexec-clientapp-{k}"]
        assert clientapp["networks"] == [f"node-{k}"]
        assert f"--runtime-api-address=supernode-{k}-runtime:9094" in clientapp["command"]
    assert partitions == list(range(n))


def _assert_hardened(name: str, service: dict[str, Any]) -> None:
    """The hardening every service carries (as resolved YAML or `docker-compose config`)."""
    uid, _, gid = str(service["user"]).partition(":")
    assert int(uid) == APP_UID and int(gid) == APP_UID, name  # never root
    assert service["read_only"] is True, name
    assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
    assert "no-new-privileges:true" in service["security_opt"], name
    assert "privileged" not in service, name
    assert int(service["pids_limit"]) > 0, name
    assert service["mem_limit"] and service["cpus"], name
    # A private, size-limited /tmp on which nothing can be executed or set-uid.
    tmp = [t for t in service["tmpfs"] if t.split(":")[0] == "/tmp"]
    assert len(tmp) == 1, name
    opts = tmp[0].split(":", 1)[1].split(",")
    assert {"noexec", "nosuid", "nodev"} <= set(opts), name
    assert any(o.startswith("size=") for o in opts), name
    # flwr's home (the apps a SuperExec installs, flwr's caches) is on that tmpfs.
    assert str(service["environment"]["FLWR_HOME"]).startswith("/tmp/"), name


@pytest.mark.parametrize("n", SIZES)
def test_every_service_is_hardened(n: int) -> None:
    services = yaml.safe_load(_gen().compose(n))["services"]
    assert len(services) == 4 + 2 * n
    for name, service in services.items():
        _assert_hardened(name, service)
        # Limits are variables with defaults (header of docker-compose.yml), except for
        # the one-shot registration.
        if name != "supernode-register":
            assert str(service["mem_limit"]).startswith("${FAIRFL_"), name
            assert str(service["cpus"]).startswith("${FAIRFL_"), name


@pytest.mark.parametrize("n", SIZES)
def test_runtime_apis_stay_off_the_shared_network(n: int) -> None:
    doc = yaml.safe_load(_gen().compose(n))
    services = doc["services"]
    # The SuperLink (for the operator) and the Fleet proxy publish a port, on loopback
    # unless told otherwise.
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert published == {
        "superlink": ["${FAIRFL_SUPERLINK_BIND:-127.0.0.1}:${FAIRFL_SUPERLINK_PORT:-8000}:8000"],
        "fleet-proxy": ["${FAIRFL_FLEET_BIND:-127.0.0.1}:${FAIRFL_FLEET_PORT:-9092}:9092"],
    }
    for k in range(1, n + 1):
        node = services[f"supernode-{k}"]
        alias = f"supernode-{k}-runtime"
        # The Runtime API binds the SuperNode's address on node-<k> alone: the name
        # exists only there, where only its own ClientApp SuperExec is.
        assert _flag(node["command"], "--host") == alias
        assert node["networks"] == {"fleet": {}, f"node-{k}": {"aliases": [alias]}}
        assert doc["networks"][f"node-{k}"] == {"internal": True}
        members = [name for name, s in services.items() if f"node-{k}" in s["networks"]]
        assert sorted(members) == sorted([f"supernode-{k}", f"superexec-clientapp-{k}"])
        clientapp = services[f"superexec-clientapp-{k}"]["command"]
        assert _flag(clientapp, "--runtime-api-address") == f"{alias}:9094"


DOCKERFILES = sorted((REPO / "deploy" / "docker").glob("*.Dockerfile"))


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_image_runs_as_the_unprivileged_app_user(path: Path) -> None:
    # The image itself, not only docker-compose.yml's `user:`, is non-root: `docker run`
    # or a Kubernetes pod without a securityContext gets uid 49999 too. Numeric, so that
    # Kubernetes' runAsNonRoot can verify it.
    users = [
        line.split(None, 1)[1].strip()
        for line in path.read_text().splitlines()
        if line.strip().upper().startswith("USER ")
    ]
    assert users, f"{path.name} sets no USER: the image would run as its base's user"
    assert users[-1] == f"{APP_UID}:{APP_UID}", path.name
    # Whatever the base, `app` exists: created in this layer when the base lacks it.
    assert "useradd --no-create-home --home-dir /app --uid 49999" in path.read_text()


def _host_port(port: str | dict[str, Any]) -> tuple[str, str, str]:
    """(host address, host port, container port) of a resolved ``ports`` entry.

    docker-compose 1.x writes the short syntax (``127.0.0.1:8000:8000/tcp``), the
    compose plugin the long one (``{host_ip, published, target}``).
    """
    if isinstance(port, dict):
        return str(port.get("host_ip", "")), str(port["published"]), str(port["target"])
    host_ip, published, target = port.split("/")[0].rsplit(":", 2)
    return host_ip, published, target


def test_only_the_superlinks_endpoints_are_published(tmp_path: Path) -> None:
    """As docker-compose applies the files (the GPU override too): a port on the host for
    the SuperLink (the operator's flwr) and for its Fleet API behind fleet-proxy, on
    loopback by default; nothing for a SuperNode, a SuperExec or the registration."""
    env = {name: "" for name in os.environ if name.startswith("FAIRFL_")}
    env["FAIRFL_PKI_DIR"] = str(tmp_path)
    for files in [(COMPOSE,), (COMPOSE, GPU)]:
        services = _compose_config(*files, env=env)["services"]
        published = {
            name: [_host_port(p) for p in s["ports"]]
            for name, s in services.items()
            if s.get("ports")
        }
        assert published == {
            "superlink": [("127.0.0.1", "8000", "8000")],
            "fleet-proxy": [("127.0.0.1", "9092", "9092")],
        }, files
        for name, service in services.items():
            assert service.get("network_mode") not in ("host", "bridge"), name


@pytest.mark.parametrize("n", SIZES)
def test_supernodes_reach_only_the_fleet_proxy(n: int) -> None:
    """The SuperLink (Fleet, Control and Runtime API on one port) is on network ``link``
    alone; SuperNodes are on ``fleet`` and their own node network, and reach it only
    through fleet-proxy, which forwards the Fleet API."""
    doc = yaml.safe_load(_gen().compose(n))
    services = doc["services"]
    assert services["superlink"]["networks"] == ["link"]
    on_link = sorted(name for name, s in services.items() if "link" in s["networks"])
    assert on_link == ["fleet-proxy", "superexec-serverapp", "superlink", "supernode-register"]
    on_fleet = sorted(name for name, s in services.items() if "fleet" in s["networks"])
    assert on_fleet == ["fleet-proxy", *sorted(f"supernode-{k}" for k in range(1, n + 1))]
    for k in range(1, n + 1):
        assert _flag(services[f"supernode-{k}"]["command"], "--superlink") == "fleet-proxy:9092"
    proxy = services["fleet-proxy"]
    assert proxy["build"]["dockerfile"] == "deploy/docker/proxy.Dockerfile"
    assert _flag(proxy["command"], "--superlink") == "superlink:8000"
    # The SuperLink's certificate is checked for its in-network name.
    assert _flag(proxy["command"], "--superlink-name") == "superlink"
    assert _flag(proxy["command"], "--listen") == "0.0.0.0:9092"
    assert sorted(proxy["secrets"]) == ["ca.crt", "superlink.crt", "superlink.key"]
    # The proxy's config, pid and logs go to its tmpfs (read-only root filesystem).
    assert _flag(proxy["command"], "--run-dir").startswith("/tmp/")


@pytest.mark.parametrize("n", SIZES)
def test_one_superexec_secret_per_superlink_and_supernode(n: int) -> None:
    """flwr verifies SuperExecs with one secret per verifying process (the SuperLink,
    each SuperNode): the SuperLink's is shared with the ServerApp's SuperExec only,
    each SuperNode's with its own ClientApp SuperExec only."""
    doc = yaml.safe_load(_gen().compose(n))
    services = doc["services"]

    def secret_of(name: str) -> str:
        path = _flag(services[name]["command"], "--superexec-auth-secret-file")
        assert path.startswith("/run/secrets/"), name
        secret = path.removeprefix("/run/secrets/")
        assert secret in services[name]["secrets"], name
        return secret

    pairs = [("superlink", "superexec-serverapp")] + [
        (f"supernode-{k}", f"superexec-clientapp-{k}") for k in range(1, n + 1)
    ]
    secrets = []
    for verifier, superexec in pairs:
        assert secret_of(verifier) == secret_of(superexec)
        secrets.append(secret_of(verifier))
    assert len(set(secrets)) == len(pairs)
    files = {doc["secrets"][s]["file"] for s in secrets}
    assert len(files) == len(pairs)
    for name, service in services.items():
        # Which SuperExec secrets a service sees: its own pair's, nothing else.
        seen = [s for s in service.get("secrets", []) if s.endswith("secret")]
        assert len(seen) <= 1, name


def _compose_config(*files: Path, env: dict[str, str]) -> dict[str, Any]:
    """`docker-compose config` (needs no engine): the file as docker-compose applies it."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    args = [exe, "--project-directory", str(REPO)]
    for f in files:
        args += ["-f", str(f)]
    res = subprocess.run(
        [*args, "config"], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def test_docker_compose_applies_hardening_and_limits(tmp_path: Path) -> None:
    gen = _gen()
    env = {"FAIRFL_PKI_DIR": str(tmp_path), "FAIRFL_CLIENTAPP_MEM_LIMIT": "8g"}
    env["FAIRFL_CLIENTAPP_CPUS"] = "1.5"
    for name in [v for v in os.environ if v.startswith("FAIRFL_") and v not in env]:
        env[name] = ""  # defaults, whatever the caller's environment says
    services = _compose_config(COMPOSE, env=env)["services"]
    for name, service in services.items():
        _assert_hardened(name, service)
    one_of_kind = {
        "superlink": "superlink",
        "supernode": "supernode-1",
        "serverapp": "superexec-serverapp",
        "clientapp": "superexec-clientapp-1",
        "proxy": "fleet-proxy",
    }
    for kind, (prefix, mem, cpus, _) in gen.LIMITS.items():
        name = one_of_kind[kind]
        if kind == "clientapp":
            mem, cpus = "8g", "1.5"  # set through the variables above
        assert services[name]["mem_limit"] == mem, (name, prefix)
        assert float(services[name]["cpus"]) == float(cpus), (name, prefix)
    # With the GPU override: the same hardening, plus the GPU reservation.
    merged = _compose_config(COMPOSE, GPU, env=env)["services"]
    for name, service in merged.items():
        _assert_hardened(name, service)
    devices = merged["superexec-clientapp-1"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_serverapp_openblas_kernels_come_from_one_variable(tmp_path: Path) -> None:
    env = {name: "" for name in os.environ if name.startswith("FAIRFL_")}
    env["FAIRFL_PKI_DIR"] = str(tmp_path)
    default = _compose_config(COMPOSE, env=env)["services"]["superexec-serverapp"]
    assert default["environment"]["OPENBLAS_CORETYPE"] == ""  # OpenBLAS's own choice
    assert default["environment"]["FLWR_HOME"] == "/tmp/flwr"  # the shared settings stay
    env["FAIRFL_SERVERAPP_OPENBLAS_CORETYPE"] = "Haswell"
    services = _compose_config(COMPOSE, env=env)["services"]
    assert services["superexec-serverapp"]["environment"]["OPENBLAS_CORETYPE"] == "Haswell"
    others = [s for name, s in services.items() if name != "superexec-serverapp"]
    assert all("OPENBLAS_CORETYPE" not in s.get("environment", {}) for s in others)


def test_tls_auth_state_and_results() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    link = doc["services"]["superlink"]["command"]
    assert "--enable-supernode-auth" in link
    assert "--isolation=process" in link
    assert any(a.startswith("--ssl-certfile=") for a in link)
    assert any(a.startswith("--database=/app/state/") for a in link)
    assert "--insecure" not in link
    for name, service in doc["services"].items():
        cmd = service.get("command", [])
        if name.startswith("supernode-") and name != "supernode-register":
            assert "--root-certificates" in cmd and "--insecure" not in cmd
    serverapp = doc["services"]["superexec-serverapp"]
    assert any(v.endswith(":/app/outputs") for v in serverapp["volumes"])
    assert "--root-certificates=/run/secrets/ca.crt" in serverapp["command"]


def test_gpu_override_reserves_gpus_and_sets_device() -> None:
    doc = yaml.safe_load(GPU.read_text())
    for k in (1, 2, 3):
        devices = doc["services"][f"superexec-clientapp-{k}"]["deploy"]["resources"][
            "reservations"
        ]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
        cmd = doc["services"][f"supernode-{k}"]["command"]
        assert 'device="cuda"' in cmd[cmd.index("--node-config") + 1]
