"""Kubernetes manifests: valid against Kubernetes' schemas, same topology as compose."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.deployment

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30"


def _docs() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


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
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(base["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    gpu = yaml.safe_load((K8S / "gpu" / "kustomization.yaml").read_text())
    assert gpu["resources"] == [".."]
    assert "nvidia.com/gpu" in gpu["patches"][0]["patch"]


def test_same_topology_as_compose() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in _docs()}
    assert {
        ("Deployment", "superlink"),
        ("Deployment", "superexec-serverapp"),
        ("StatefulSet", "supernode"),
        ("Job", "supernode-register"),
    } <= kinds
    link = next(
        d for _, d in _docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "superlink"
    )
    args = link["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enable-supernode-auth" in args and "--isolation=process" in args
    sts = next(d for _, d in _docs() if d["kind"] == "StatefulSet")
    containers = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"supernode", "superexec"}
    script = containers["supernode"]["args"][0]
    assert "partition-id=$k" in script and "--auth-supernode-private-key" in script
