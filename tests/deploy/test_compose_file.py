"""docker-compose.yml: valid against the Compose Specification's JSON schema, in sync
with its generator, and wired as issue 7 asks (TLS, authentication, one partition and
one key per SuperNode, results on a volume, GPU override)."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

pytestmark = pytest.mark.deployment

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "deploy" / "schemas" / "compose-spec.json"
COMPOSE = REPO / "docker-compose.yml"
GPU = REPO / "deploy" / "docker" / "docker-compose.gpu.yml"


def _gen():
    spec = importlib.util.spec_from_file_location(
        "compose_gen", REPO / "deploy/docker/compose_gen.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        assert [s for s in services[f"supernode-{k}"]["secrets"] if s.startswith("supernode-")] == [
            f"supernode-{k}"
        ]
        clientapp = services[f"superexec-clientapp-{k}"]
        assert clientapp["networks"] == [f"node-{k}"]
        assert f"--runtime-api-address=supernode-{k}:9094" in clientapp["command"]
    assert partitions == list(range(n))


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
