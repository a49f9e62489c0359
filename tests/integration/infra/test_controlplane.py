"""Smoke tests of the real control plane (tests.infra.controlplane)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.infra.controlplane import CPU_NODE, GPU_NODE, ApiError, CommandError, ControlPlane
from tests.infra.process import poll_until

pytestmark = pytest.mark.controlplane

JSON = dict[str, Any]


def _namespace(cp: ControlPlane) -> str:
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    cp.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def _deployment(name: str) -> JSON:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/never-pulled:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def _ready(pod: JSON) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def test_fake_nodes_are_ready_with_gpu_capacity(control_plane: ControlPlane) -> None:
    nodes = {n["metadata"]["name"]: n for n in control_plane.api("GET", "/api/v1/nodes")["items"]}
    assert set(nodes) >= {GPU_NODE.name, CPU_NODE.name}
    for name in (GPU_NODE.name, CPU_NODE.name):
        assert control_plane.node_ready(name)
    gpu = nodes[GPU_NODE.name]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert gpu["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert gpu["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert "nvidia.com/gpu" not in nodes[CPU_NODE.name]["status"]["allocatable"]


def test_server_reports_v1_36(control_plane: ControlPlane) -> None:
    version = control_plane.api("GET", "/version")
    assert version["major"] == "1"
    assert version["minor"] == "36"
    assert version["gitVersion"].startswith("v1.36.")
    client = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert client["clientVersion"]["gitVersion"].startswith("v1.36.")


def test_deployment_gets_a_running_pod_on_the_gpu_node(control_plane: ControlPlane) -> None:
    ns = _namespace(control_plane)
    control_plane.api("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment("gpu-app"))

    def running_pod() -> JSON | None:
        pods = control_plane.api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dgpu-app")["items"]
        return next((p for p in pods if _ready(p)), None)

    pod = poll_until(
        running_pod,
        timeout=60,
        what="a Running, Ready pod of the Deployment",
        detail=lambda: control_plane.logs("kwok") + "\n" + control_plane.logs("kube-scheduler"),
    )
    assert pod["spec"]["nodeName"] == GPU_NODE.name
    assert pod["status"]["podIP"]

    def deployment_available() -> bool:
        deployment = control_plane.api("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/gpu-app")
        return bool(deployment.get("status", {}).get("availableReplicas") == 1)

    poll_until(deployment_available, timeout=60, what="the Deployment to be available")

    # The garbage collector removes the ReplicaSet (and pods) owned by a deleted Deployment.
    control_plane.api(
        "DELETE",
        f"/apis/apps/v1/namespaces/{ns}/deployments/gpu-app",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )
    poll_until(
        lambda: not control_plane.api("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"],
        timeout=60,
        what="the garbage collector to delete the ReplicaSet",
    )


def test_service_account_kubeconfig_has_only_its_rbac(control_plane: ControlPlane) -> None:
    ns = _namespace(control_plane)
    control_plane.api(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}},
    )
    kubeconfig = control_plane.service_account_kubeconfig(ns, "robot")

    def can_i(verb: str, resource: str) -> str:
        result = control_plane.kubectl("auth", "can-i", verb, resource, "-n", ns, kubeconfig=kubeconfig, check=False)
        return result.stdout.strip()

    assert can_i("list", "pods") == "no"
    with pytest.raises(CommandError, match="Forbidden"):
        control_plane.kubectl("get", "pods", "-n", ns, kubeconfig=kubeconfig)

    control_plane.kubectl(
        "create", "rolebinding", "robot-view", "--clusterrole=view", f"--serviceaccount={ns}:robot", "-n", ns
    )
    assert poll_until(lambda: can_i("list", "pods") == "yes", timeout=30, what="RBAC to allow the robot")
    control_plane.kubectl("get", "pods", "-n", ns, kubeconfig=kubeconfig)

    token = control_plane.create_token(ns, "robot")
    with pytest.raises(ApiError) as forbidden:
        control_plane.api("GET", "/api/v1/nodes", token=token)
    assert forbidden.value.status == 403


def test_helm_is_v4(control_plane: ControlPlane) -> None:
    out = control_plane.helm("version", "--short").stdout.strip()
    assert out.startswith("v4."), out


def test_helm_installs_a_chart(control_plane: ControlPlane, tmp_path: Path) -> None:
    chart = tmp_path / "smoke"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: smoke\nversion: 0.1.0\nkubeVersion: '>=1.30.0-0'\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\n"
        "data:\n  answer: {{ .Values.answer | quote }}\n"
    )
    (chart / "values.yaml").write_text("answer: '42'\n")
    ns = _namespace(control_plane)
    control_plane.helm("install", "smoke", str(chart), "-n", ns, "--wait", "--timeout", "60s")
    configmap = control_plane.api("GET", f"/api/v1/namespaces/{ns}/configmaps/smoke-cfg")
    assert configmap["data"] == {"answer": "42"}
    control_plane.helm("uninstall", "smoke", "-n", ns, "--wait")
