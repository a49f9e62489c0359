"""The kubelet stand-in against a real control plane: pods run as local processes with real probes,
volumes, environment, restarts and deletion; Deployments and Services work as in a cluster."""

from __future__ import annotations

import base64
import ipaddress
import os
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples.repository import build_repository

from e2e.kubelet import KubeletStandIn
from e2e.kubelet.process import stand_in_image
from tests.infra.api import JSON
from tests.infra.controlplane import ApiError, ControlPlane
from tests.infra.process import poll_until

pytestmark = pytest.mark.controlplane

T = TypeVar("T")
MOUNTS = "/run/e2e-kubelet"  # mount points the tests' containers use (created on the host, bound privately)


def wait(
    kubelet: KubeletStandIn, namespace: str, pod: str, probe: Callable[[], T | None], what: str, timeout: float = 60.0
) -> T:
    return poll_until(
        probe,
        timeout=timeout,
        what=what,
        detail=lambda: f"logs of {namespace}/{pod}:\n" + _all_logs(kubelet, namespace, pod),
    )


def _all_logs(kubelet: KubeletStandIn, namespace: str, pod: str) -> str:
    pod_dir = kubelet.pod_dir(namespace, pod)
    files = sorted(pod_dir.glob("*.log")) if pod_dir.exists() else []
    return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in files)


def in_pod_network(kubelet: KubeletStandIn, ip: str) -> bool:
    return ipaddress.ip_address(ip) in ipaddress.ip_network(kubelet.pod_cidr)


def get_pod(cp: ControlPlane, namespace: str, name: str) -> JSON | None:
    try:
        return cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def pod_when(
    cp: ControlPlane, namespace: str, name: str, predicate: Callable[[JSON], bool]
) -> Callable[[], JSON | None]:
    """A poll probe: the pod once `predicate` holds for it, else None."""

    def probe() -> JSON | None:
        pod = get_pod(cp, namespace, name)
        return pod if pod is not None and predicate(pod) else None

    return probe


def condition(pod: JSON | None, kind: str) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def container_status(pod: JSON | None, name: str) -> JSON:
    statuses = (pod or {}).get("status", {}).get("containerStatuses", [])
    return next((s for s in statuses if s["name"] == name), {})


def pod_manifest(kubelet: KubeletStandIn, name: str, containers: list[JSON], **spec: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": kubelet.node_name},
            "terminationGracePeriodSeconds": 5,
            "containers": containers,
            **spec,
        },
    }


POD_IP_ENV = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def web_container(name: str = "web", **extra: Any) -> JSON:
    return {
        "name": name,
        "image": "python:3.11",
        "command": ["python", "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
        "env": [POD_IP_ENV],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        **extra,
    }


def create(cp: ControlPlane, namespace: str, manifest: JSON, plural: str = "pods", group: str = "api/v1") -> None:
    cp.api("POST", f"/{group}/namespaces/{namespace}/{plural}", manifest)


def http_get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as response:
        status: int = response.status
        return status


def test_pod_becomes_ready_on_its_own_ip(control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str) -> None:
    create(control_plane, namespace, pod_manifest(kubelet, "web", [web_container()]))
    pod = wait(
        kubelet,
        namespace,
        "web",
        pod_when(control_plane, namespace, "web", lambda p: condition(p, "Ready")),
        "pod web to become Ready",
    )
    status = pod["status"]
    assert status["phase"] == "Running"
    assert in_pod_network(kubelet, status["podIP"]) and status["podIPs"] == [{"ip": status["podIP"]}]
    assert status["hostIP"] == "127.0.0.1"
    assert all(condition(pod, c) for c in ("PodScheduled", "Initialized", "ContainersReady", "Ready"))
    web = container_status(pod, "web")
    assert (web["ready"], web["started"], web["restartCount"]) == (True, True, 0)
    assert "running" in web["state"]
    assert http_get(f"http://{status['podIP']}:8080/") == 200


def test_config_map_volume_is_mounted_and_follows_updates(
    control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str
) -> None:
    create(
        control_plane,
        namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "greeting"}, "data": {"greeting.txt": "hello"}},
        "configmaps",
    )
    mount = f"{MOUNTS}/config"
    reader = {
        "name": "reader",
        "image": "busybox",
        "command": [
            "sh",
            "-c",
            f'echo "tmp has $(ls -A /tmp | wc -l) entries"; touch /tmp/mine; touch {mount}/x || echo read-only; '
            f'while true; do echo "read: $(cat {mount}/greeting.txt)"; sleep 0.2; done',
        ],
        # The emptyDir on /tmp is bound first, yet must not hide the ConfigMap's directory (under /tmp here).
        "volumeMounts": [
            {"name": "config", "mountPath": mount, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    volumes = [{"name": "config", "configMap": {"name": "greeting"}}, {"name": "tmp", "emptyDir": {}}]
    manifest = pod_manifest(kubelet, "reader", [reader], volumes=volumes)
    create(control_plane, namespace, manifest)
    wait(
        kubelet,
        namespace,
        "reader",
        lambda: "read: hello" in kubelet.logs(namespace, "reader", "reader"),
        "the ConfigMap's file at its mountPath",
    )
    assert not Path(mount, "greeting.txt").exists()  # bound in the container's own mount namespace only
    logs = kubelet.logs(namespace, "reader", "reader")
    # an empty /tmp, but for the stand-in image bound back when the checkout itself lives under /tmp
    under_tmp = {p.split("/")[2] for p in stand_in_image() if p.startswith("/tmp/")}
    assert f"tmp has {len(under_tmp)} entries" in logs and "read-only" in logs
    assert (kubelet.pod_dir(namespace, "reader") / "volumes" / "tmp" / "mine").exists()

    control_plane.kubectl(
        "-n", namespace, "patch", "configmap", "greeting", "--type=merge", "-p", '{"data": {"greeting.txt": "goodbye"}}'
    )
    wait(
        kubelet,
        namespace,
        "reader",
        lambda: "read: goodbye" in kubelet.logs(namespace, "reader", "reader"),
        "the ConfigMap update in the mounted file",
        timeout=15,
    )


def test_environment_from_secret_config_map_and_fields(
    control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str
) -> None:
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "data": {"token": base64.b64encode(b"s3cr3t").decode()},
        },
        "secrets",
    )
    create(
        control_plane,
        namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "fast"}},
        "configmaps",
    )
    printer = {
        "name": "printer",
        "image": "busybox",
        "command": ["sh", "-c", 'echo "env token=$TOKEN mode=$MODE ns=$NS"; echo "arg $1"', "sh"],
        "args": ["$(TOKEN)-$(NS)-$$(NOT_EXPANDED)-$(UNDEFINED)"],
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
    }
    create(control_plane, namespace, pod_manifest(kubelet, "printer", [printer], restartPolicy="Never"))
    pod = wait(
        kubelet,
        namespace,
        "printer",
        pod_when(control_plane, namespace, "printer", lambda p: p["status"].get("phase") == "Succeeded"),
        "pod printer to succeed",
    )
    logs = kubelet.logs(namespace, "printer", "printer")
    assert f"env token=s3cr3t mode=fast ns={namespace}" in logs
    assert f"arg s3cr3t-{namespace}-$(NOT_EXPANDED)-$(UNDEFINED)" in logs
    terminated = container_status(pod, "printer")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")


def test_liveness_failure_restarts_the_container(
    control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str
) -> None:
    web = web_container(
        livenessProbe={
            "httpGet": {"path": "/missing", "port": 8080},
            "initialDelaySeconds": 1,
            "periodSeconds": 1,
            "failureThreshold": 2,
        }
    )
    create(control_plane, namespace, pod_manifest(kubelet, "sick", [web], terminationGracePeriodSeconds=1))
    pod = wait(
        kubelet,
        namespace,
        "sick",
        pod_when(control_plane, namespace, "sick", lambda p: container_status(p, "web").get("restartCount", 0) >= 1),
        "a restart after liveness failures",
    )
    status = container_status(pod, "web")
    assert "terminated" in status["lastState"]
    assert kubelet.logs(namespace, "sick", "web").count('"GET /missing HTTP/1.1" 404') >= 2


def test_deletion_runs_pre_stop_then_stops_and_removes_the_pod(
    control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str, tmp_path: Path
) -> None:
    mount = f"{MOUNTS}/marker"
    worker = {
        "name": "worker",
        "image": "busybox",
        "command": ["sh", "-c", 'trap "echo got TERM; exit 0" TERM; echo started; while true; do sleep 0.1; done'],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", f"echo pre-stop ran > {mount}/pre-stop"]}}},
        "volumeMounts": [{"name": "marker", "mountPath": mount}],
    }
    manifest = pod_manifest(
        kubelet,
        "worker",
        [worker],
        volumes=[{"name": "marker", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
    )
    create(control_plane, namespace, manifest)
    wait(
        kubelet,
        namespace,
        "worker",
        lambda: condition(get_pod(control_plane, namespace, "worker"), "Ready"),
        "pod worker to become Ready",
    )
    wait(
        kubelet,
        namespace,
        "worker",
        lambda: "started" in kubelet.logs(namespace, "worker", "worker"),
        "the worker's shell to start",
    )
    pid = kubelet.container_pid(namespace, "worker", "worker")
    assert pid is not None

    control_plane.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/worker")
    wait(
        kubelet,
        namespace,
        "worker",
        lambda: get_pod(control_plane, namespace, "worker") is None,
        "pod worker to be removed",
        timeout=30,
    )
    assert (tmp_path / "pre-stop").read_text() == "pre-stop ran\n"
    assert "got TERM" in kubelet.logs(namespace, "worker", "worker")
    assert not Path(f"/proc/{pid}").exists()


def test_deployment_pods_back_a_service(control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str) -> None:
    labels = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": kubelet.node_name},
                    "terminationGracePeriodSeconds": 2,
                    "containers": [web_container()],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    create(control_plane, namespace, deployment, "deployments", "apis/apps/v1")
    create(control_plane, namespace, service, "services")

    def ready_replicas() -> bool:
        status = control_plane.api("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/web").get("status", {})
        return bool(status.get("readyReplicas") == 2)

    poll_until(ready_replicas, timeout=60, what="2 ready replicas")
    pods = control_plane.api("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3Dweb")["items"]
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 2 and all(in_pod_network(kubelet, ip) for ip in ips)
    assert all(p["spec"]["nodeName"] == kubelet.node_name for p in pods)
    assert all(http_get(f"http://{ip}:8080/") == 200 for ip in ips)

    if ipaddress.ip_network(kubelet.pod_cidr).is_loopback:
        pytest.skip("pod IPs fell back to loopback (no CAP_NET_ADMIN?), which EndpointSlices refuse")

    def slice_addresses() -> set[str] | None:
        path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb"
        endpoints = [e for s in control_plane.api("GET", path)["items"] for e in s.get("endpoints") or []]
        ready = {a for e in endpoints if e.get("conditions", {}).get("ready") for a in e["addresses"]}
        return ready if ready == ips else None

    poll_until(slice_addresses, timeout=30, what=f"the EndpointSlice of service web to list {sorted(ips)}")


def test_killed_process_is_restarted(control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str) -> None:
    sleeper = {
        "name": "sleeper",
        "image": "busybox",
        "command": ["sh", "-c", "echo up; while true; do sleep 0.1; done"],
    }
    create(control_plane, namespace, pod_manifest(kubelet, "sleeper", [sleeper]))
    wait(
        kubelet,
        namespace,
        "sleeper",
        lambda: condition(get_pod(control_plane, namespace, "sleeper"), "Ready"),
        "pod sleeper to become Ready",
    )
    pid = kubelet.container_pid(namespace, "sleeper", "sleeper")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    pod = wait(
        kubelet,
        namespace,
        "sleeper",
        pod_when(
            control_plane,
            namespace,
            "sleeper",
            lambda p: container_status(p, "sleeper").get("restartCount") == 1 and condition(p, "Ready"),
        ),
        "the killed container to be restarted",
    )
    assert container_status(pod, "sleeper")["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert kubelet.container_pid(namespace, "sleeper", "sleeper") not in (None, pid)


def test_the_runtime_runs_as_a_pod_and_serves_grpc(
    control_plane: ControlPlane, kubelet: KubeletStandIn, namespace: str, tmp_path: Path
) -> None:
    repository = tmp_path / "models"
    build_repository(repository, only=["add_sub"])
    mount = f"{MOUNTS}/models"
    runtime = {
        "name": "runtime",
        "image": "ensemble-runtime:dev",
        "args": [f"--model-repository={mount}", "--model-control-mode=explicit", "--load-model=add_sub"],
        "ports": [{"name": "http", "containerPort": 8000}, {"name": "grpc", "containerPort": 8001}],
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 1},
        "volumeMounts": [{"name": "models", "mountPath": mount, "readOnly": True}],
    }
    manifest = pod_manifest(
        kubelet, "runtime", [runtime], volumes=[{"name": "models", "hostPath": {"path": str(repository)}}]
    )
    create(control_plane, namespace, manifest)
    pod = wait(
        kubelet,
        namespace,
        "runtime",
        pod_when(control_plane, namespace, "runtime", lambda p: condition(p, "Ready")),
        "the runtime pod to become Ready",
        timeout=180,
    )

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    with grpcclient.InferenceServerClient(f"{pod['status']['podIP']}:8001") as client:
        assert client.is_model_ready("add_sub")
        result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
