"""Kubernetes manifests: valid against Kubernetes' schemas, same topology as compose, and
hardened as issue 21 asks: every container non-root with no capabilities, no privilege
escalation, a read-only root filesystem (emptyDir /tmp), RuntimeDefault seccomp and
resource requests and limits; network policies that deny everything but the
SuperLink's port to its server-side clients, the Fleet proxy's port to the SuperNodes
(and DNS). Static checks of the files; the rendering
checks run ``kubectl kustomize`` (offline) where kubectl is installed."""

from __future__ import annotations

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
