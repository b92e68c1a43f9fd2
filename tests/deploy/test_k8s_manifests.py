"""Kubernetes manifests: valid against Kubernetes' schemas, same topology as compose, and
hardened as issue 21 asks: every container non-root with no capabilities, no privilege
escalation, a read-only root filesystem (emptyDir /tmp), RuntimeDefault seccomp and
resource requests and limits; network policies that deny everything but the
SuperLink's port to its server-side clients, the Fleet proxy's port to the SuperNodes
(and DNS). Static checks of the files; the rendering
checks run ``kubectl kustomize`` (offline) where kubectl is installed."""

from __future__ import annotations

import argparse
import functools
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
BASE = K8S / "base"
KUBERNETES_VERSION = "1.30"
WORKLOADS = {"Deployment", "StatefulSet", "Job"}
# Resource quantities as the manifests write them (cpu: cores or millicores; memory: Mi/Gi).
UNITS = {"m": 1e-3, "Mi": 2**20, "Gi": 2**30}


def _docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(BASE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _find(kind: str, name: str) -> dict[str, Any]:
    return next(d for _, d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name)


def _pods() -> list[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every workload."""
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for _, d in _docs()
        if d["kind"] in WORKLOADS
    ]


def _quantity(value: str | int) -> float:
    text = str(value)
    for suffix, scale in UNITS.items():
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * scale
    return float(text)


def test_manifests_validate_against_kubernetes_schemas() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    from kubernetes_validate import utils

    version = next(v for v in utils.all_versions() if v.startswith(KUBERNETES_VERSION))
    for name, doc in _docs():
        kv.validate(doc, version, strict=True)  # raises with the offending path
        assert doc["metadata"]["namespace" if doc["kind"] != "Namespace" else "name"] == "fairfl", (
            name
        )


def test_kustomizations_list_every_manifest() -> None:
    top = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert top["resources"] == ["base"]
    assert sorted(p.name for p in K8S.glob("*.yaml")) == ["kustomization.yaml"]
    base = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert sorted(base["resources"]) == sorted(
        p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    gpu = yaml.safe_load((K8S / "gpu" / "kustomization.yaml").read_text())
    # Not "..": an overlay inside the directory it builds on is a cycle to kustomize.
    assert gpu["resources"] == ["../base"]
    assert "nvidia.com~1gpu" in gpu["patches"][0]["patch"]


def test_same_topology_as_compose() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in _docs()}
    assert {
        ("Deployment", "superlink"),
        ("Deployment", "superexec-serverapp"),
        ("StatefulSet", "supernode"),
        ("Job", "supernode-register"),
        ("Deployment", "fleet-proxy"),
    } <= kinds
    link = _find("Deployment", "superlink")
    args = link["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enable-supernode-auth" in args and "--isolation=process" in args
    sts = _find("StatefulSet", "supernode")
    containers = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"supernode", "superexec"}
    script = containers["supernode"]["args"][0]
    assert "partition-id=$k" in script and "--auth-supernode-private-key" in script
    # SuperNodes talk to the Fleet proxy, which talks to the SuperLink.
    assert "--superlink fleet-proxy.fairfl.svc:9092 " in script
    proxy = _find("Deployment", "fleet-proxy")["spec"]["template"]["spec"]
    args = proxy["containers"][0]["args"]
    assert args[args.index("--superlink") + 1] == "superlink.fairfl.svc:8000"
    assert args[args.index("--superlink-name") + 1] == "superlink.fairfl.svc"
    # The proxy gets the CA and the server pair from the SuperLink's Secret, not its
    # SuperExec secret.
    items = next(v for v in proxy["volumes"] if "secret" in v)["secret"]["items"]
    assert sorted(i["key"] for i in items) == ["ca.crt", "superlink.crt", "superlink.key"]
    assert _find("Service", "fleet-proxy")["spec"]["ports"][0]["port"] == 9092
    # The ServerApp reads the client registration where compose's ServerApp does.
    server = _find("Deployment", "superexec-serverapp")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in server["containers"][0]["volumeMounts"]}
    assert mounts["client-registration"]["mountPath"] == "/app/registration"
    assert mounts["client-registration"]["readOnly"] is True
    volume = next(v for v in server["volumes"] if v["name"] == "client-registration")
    assert volume["configMap"]["name"] == "fairfl-client-registration"


def test_namespace_enforces_the_restricted_pod_security_standard() -> None:
    labels = _find("Namespace", "fairfl")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_every_container_is_hardened() -> None:
    pods = _pods()
    assert {name for name, _ in pods} == {
        "superlink",
        "supernode-register",
        "superexec-serverapp",
        "supernode",
        "fleet-proxy",
    }
    for workload, pod in pods:
        pod_sc = pod.get("securityContext", {})
        assert pod.get("automountServiceAccountToken") is False, workload
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod.get("initContainers", []) + pod["containers"]:
            where = f"{workload}/{c['name']}"
            sc = {**pod_sc, **c.get("securityContext", {})}  # container settings win
            assert sc["runAsNonRoot"] is True, where
            assert sc["runAsUser"] > 0 and sc["runAsGroup"] > 0, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert not sc.get("privileged", False), where
            requests, limits = c["resources"]["requests"], c["resources"]["limits"]
            for resource in ("cpu", "memory"):
                assert _quantity(requests[resource]) <= _quantity(limits[resource]), where
            # Writes go to volumes: /tmp is an emptyDir of bounded size, never the image.
            if c in pod["containers"]:
                mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
                tmp = volumes[mounts["/tmp"]]
                assert "sizeLimit" in tmp["emptyDir"], where
                env = {e["name"]: e.get("value") for e in c["env"]}
                assert env["FLWR_HOME"].startswith("/tmp/"), where


def test_supernode_runtime_api_and_secret_stay_in_the_pod() -> None:
    pod = _find("StatefulSet", "supernode")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    script = containers["supernode"]["args"][0]
    assert "--host 127.0.0.1 --port 9094" in script
    assert "--runtime-api-address=127.0.0.1:9094" in containers["superexec"]["args"]
    assert "ports" not in _find("Service", "supernode")["spec"]
    # The SuperExec secret is drawn in the pod into a memory-backed emptyDir, and the
    # SuperLink's secret is not given to the devices.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["superexec-secret"]["emptyDir"]["medium"] == "Memory"
    secret_file = "/run/fairfl-superexec/secret"
    assert f"--superexec-auth-secret-file {secret_file}" in script
    assert f"--superexec-auth-secret-file={secret_file}" in containers["superexec"]["args"]
    assert [c["name"] for c in pod["initContainers"]] == ["superexec-secret"]
    assert secret_file in pod["initContainers"][0]["args"][0]
    for volume in volumes.values():
        items = volume.get("secret", {}).get("items", [])
        assert "superexec.secret" not in {i["key"] for i in items}
        if volume.get("secret", {}).get("secretName") == "fairfl-superlink":
            assert items, "supernode pods must take only ca.crt from fairfl-superlink"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions with In) matches labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", "only In is used here"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _peer(peer: dict[str, Any]) -> str:
    """A readable name for a policy peer: the app it selects, or kube-dns."""
    if "namespaceSelector" in peer:
        assert peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "kube-system"
        }
        assert peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
        return "kube-dns"
    assert set(peer) == {"podSelector"}, "no ipBlock: nothing outside the cluster"
    return peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]


def _allowed(app: str, direction: str) -> set[tuple[str, str, int]]:
    """What the policies let pods of ``app`` send ("egress") or receive ("ingress")."""
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "fairfl"}
    key, peers = ("Egress", "to") if direction == "egress" else ("Ingress", "from")
    allowed = set()
    selected = False
    for _, doc in _docs():
        if doc["kind"] != "NetworkPolicy" or not _selects(doc["spec"]["podSelector"], labels):
            continue
        if key in doc["spec"]["policyTypes"]:
            selected = True
        for rule in doc["spec"].get(direction, []):
            assert rule.get(peers) and rule.get("ports"), "every rule names peers and ports"
            for peer in rule[peers]:
                for port in rule["ports"]:
                    allowed.add((_peer(peer), port["protocol"], port["port"]))
    assert selected, f"{app}: no {direction} policy selects it (default allow)"
    return allowed


def test_network_policies_give_devices_only_the_fleet_proxy() -> None:
    deny = _find("NetworkPolicy", "default-deny")["spec"]
    assert deny["podSelector"] == {} and sorted(deny["policyTypes"]) == ["Egress", "Ingress"]
    assert "ingress" not in deny and "egress" not in deny
    dns = {("kube-dns", "UDP", 53), ("kube-dns", "TCP", 53)}
    # Devices reach the Fleet proxy's port, nothing else, and accept nothing.
    assert _allowed("supernode", "egress") == dns | {("fleet-proxy", "TCP", 9092)}
    assert _allowed("supernode", "ingress") == set()
    assert _allowed("fleet-proxy", "ingress") == {("supernode", "TCP", 9092)}
    clients = ["fleet-proxy", "superexec-serverapp", "supernode-register"]
    for app in clients:
        # The server side reaches the SuperLink's port (all three APIs), nothing else.
        assert _allowed(app, "egress") == dns | {("superlink", "TCP", 8000)}, app
        if app != "fleet-proxy":
            assert _allowed(app, "ingress") == set(), app
    assert _allowed("superlink", "ingress") == {(app, "TCP", 8000) for app in clients}
    assert _allowed("superlink", "egress") == dns


def _kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (its kustomize renders offline)")
    res = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def test_kustomize_renders_base_and_gpu_overlay() -> None:
    base = _kustomize(K8S)
    assert {(d["kind"], d["metadata"]["name"]) for d in base} == {
        (d["kind"], d["metadata"]["name"]) for _, d in _docs()
    }
    gpu = _kustomize(K8S / "gpu")
    sts = next(d for d in gpu if d["kind"] == "StatefulSet")
    supernode, superexec = sts["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e["value"] for e in supernode["env"]}["DEVICE"] == "cuda"
    # The GPU is added to the sidecar's limits; its CPU and memory limits stay.
    assert superexec["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}


# --------------------------------------------------------------------------- listeners

# Where each flwr process listens, as flwr's own source has it (read in the 1.33.0,
# 1.36.0 and 1.41.0 wheels and the installed 1.42). From 1.36 the SuperNode's runtime
# (ClientAppIo) API is an HTTP server on --host/--port, default 127.0.0.1:9094
# (supercore/constant.py UVICORN_DEFAULT_HOST); before, --clientappio-api-address
# defaulted to 0.0.0.0:9094. In 1.36 the SuperLink served the runtime API on
# --host/--port and still the gRPC Fleet (0.0.0.0:9092) and Control (0.0.0.0:9093)
# APIs; by 1.41 all three are on --host/--port, the gRPC ones only behind
# FLWR_INTERNAL_GRPC_FLEET_API / FLWR_INTERNAL_GRPC_CONTROL_API. The manifests are
# written for that single port, so the images must pin flwr >= 1.41.
SINGLE_PORT_FLWR = (1, 41)
INTERNAL_GRPC_ENV = ("FLWR_INTERNAL_GRPC_FLEET_API", "FLWR_INTERNAL_GRPC_CONTROL_API")
DOCKER = K8S.parent / "docker"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
ANY = ("0.0.0.0", "::", "")


@functools.cache
def _rendered() -> list[dict[str, Any]]:
    """The manifests as ``kubectl kustomize`` renders them; the files where it is absent."""
    if shutil.which("kubectl") is None:
        return [d for _, d in _docs()]
    return _kustomize(K8S)


def _flwr_command(container: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(program, arguments) of a container that runs a flwr process, else None.

    The image's entrypoint (``flower-superlink`` ...) takes ``args``; a shell script's
    ``exec flower-...`` line is split as the shell would (variables left as they are:
    they fill node configs and key paths, never an address).
    """
    image = container["image"].split("/")[-1].split(":")[0]
    if "command" not in container:
        program = {"superlink": "flower-superlink", "superexec": "flower-superexec"}.get(image)
        return (program, list(container.get("args", []))) if program else None
    script = " ".join(container["args"]).replace("\\\n", " ")
    for line in script.splitlines():
        words = shlex.split(line)
        if words[:2] and words[0] == "exec" and words[1].startswith("flower-"):
            return words[1], words[2:]
    return None


def _parse(program: str, arguments: list[str]) -> argparse.Namespace:
    """The arguments as the installed flwr parses them (an unknown flag fails here)."""
    from flwr.supercore.cli.flower_superexec import _parse_args as superexec_parser
    from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

    parser = {
        "flower-superlink": _parse_args_run_superlink,
        "flower-supernode": _parse_args_run_supernode,
        "flower-superexec": superexec_parser,
    }[program]()
    return parser.parse_args(arguments)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _listeners(container: dict[str, Any]) -> set[tuple[str, int]]:
    """The (host, port) pairs a container's process listens on."""
    if container["name"] == "fleet-proxy":  # nginx from start-proxy.sh: --listen
        args = container["args"]
        return {_split(args[args.index("--listen") + 1])}
    command = _flwr_command(container)
    if command is None:
        return set()
    program, arguments = command
    parsed = _parse(program, arguments)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert not any(env.get(name) == "1" for name in INTERNAL_GRPC_ENV), container["name"]
    listening = set()
    if program in ("flower-superlink", "flower-supernode"):
        listening.add((parsed.host, int(parsed.port)))
    if parsed.health_server_address is not None:
        listening.add(_split(parsed.health_server_address))
    return listening


def _pods_rendered() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(d, d["spec"]["template"]["spec"]) for d in _rendered() if d["kind"] in WORKLOADS]


def _container_port(container: dict[str, Any], port: str | int) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert port in named, f"{container['name']}: no containerPort named {port}"
    return int(named[port])


def test_images_pin_a_flwr_with_the_single_port_layout() -> None:
    from importlib.metadata import version

    installed = tuple(int(x) for x in version("flwr").split(".")[:2])
    assert installed >= SINGLE_PORT_FLWR  # the parser the next tests use
    for name in ("superlink", "supernode", "superexec"):
        text = (DOCKER / f"{name}.Dockerfile").read_text()
        pinned = re.search(r"^ARG FLWR_VERSION=(\d+)\.(\d+)", text, re.MULTILINE)
        assert pinned, name
        assert (int(pinned[1]), int(pinned[2])) >= SINGLE_PORT_FLWR, name


def test_every_probe_and_port_targets_an_address_its_process_listens_on() -> None:
    """kubelet probes, containerPorts and Services reach the pod's IP: each must name a
    port that the container's process binds on every interface, not on loopback."""
    services = [d for d in _rendered() if d["kind"] == "Service"]
    probed = 0
    for workload, pod in _pods_rendered():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        for container in pod["containers"]:
            where = f"{workload['metadata']['name']}/{container['name']}"
            listening = _listeners(container)
            outward = {port for host, port in listening if host in ANY}
            for port in container.get("ports", []):
                assert port["containerPort"] in outward, (where, port, listening)
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = container.get(kind)
                if probe is None:
                    continue
                probed += 1
                action = next(probe[a] for a in ("tcpSocket", "httpGet", "grpc") if a in probe)
                assert _container_port(container, action["port"]) in outward, (where, kind)
            for service in services:
                selector = service["spec"].get("selector", {})
                if not selector or any(labels.get(k) != v for k, v in selector.items()):
                    continue
                for port in service["spec"].get("ports", []):
                    target = port.get("targetPort", port["port"])
                    assert _container_port(container, target) in outward, (where, port)
    assert probed >= 2  # the SuperLink's and the Fleet proxy's readiness probes


def test_every_flwr_client_reaches_a_listener() -> None:
    """Each address a process connects to: a Service port whose pods listen on every
    interface, or loopback served by a container of the same pod."""
    rendered = _rendered()
    services = {
        f"{d['metadata']['name']}.{d['metadata']['namespace']}.svc": d
        for d in rendered
        if d["kind"] == "Service"
    }
    pods = _pods_rendered()
    checked = 0
    for workload, pod in pods:
        for container in pod["containers"]:
            command = _flwr_command(container)
            if command is None or command[0] not in ("flower-supernode", "flower-superexec"):
                continue
            parsed = _parse(*command)
            target = (
                parsed.superlink if command[0] == "flower-supernode" else parsed.runtime_api_address
            )
            host, port = _split(target)
            where = f"{workload['metadata']['name']}/{container['name']} -> {target}"
            if host in LOOPBACK:
                served = set().union(*(_listeners(c) for c in pod["containers"]))
                assert (host, port) in served or any((h, port) in served for h in ANY), where
            else:
                service = services[host]
                assert port in {p["port"] for p in service["spec"]["ports"]}, where
                selected = [
                    (w, p)
                    for w, p in pods
                    if all(
                        w["spec"]["template"]["metadata"]["labels"].get(k) == v
                        for k, v in service["spec"]["selector"].items()
                    )
                ]
                assert selected, where
            checked += 1
    assert checked == 3  # the SuperNode, its SuperExec sidecar, the ServerApp's SuperExec
