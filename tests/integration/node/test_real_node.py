"""A real node: the kubelet runs pods in containers (containerd + runc), enforces their securityContext,
restarts exited containers; kube-proxy balances a Service; GPU-requesting pods schedule on the
advertised `nvidia.com/gpu` capacity."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error

import pytest

from tests.infra.controlplane import ControlPlane
from tests.infra.node import GPU_RESOURCE, RealNode
from tests.infra.node_config import PAUSE_IMAGE
from tests.infra.node_host import HostBusy, host_lock
from tests.infra.process import poll_until

from .conftest import ECHO_IMAGE, record_timing
from .support import (
    JSON,
    RESTRICTED_CONTAINER_SECURITY,
    container_status,
    create,
    deployment,
    get_pod,
    http_get,
    http_post,
    pod,
    service,
    wait_pod_ready,
)

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.timeout(600)]


def test_node_becomes_ready_with_containerd_and_gpu_capacity(node_cluster: tuple[ControlPlane, RealNode]) -> None:
    cp, node = node_cluster
    assert cp.node_ready(node.name)
    info = node.node()["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2.")
    assert info["kubeletVersion"] == "v1.36.4"
    addresses = node.node()["status"]["addresses"]
    assert {"type": "InternalIP", "address": node.node_ip} in addresses
    assert node.node()["status"]["allocatable"][GPU_RESOURCE] == "1"


def test_pause_pod_runs_non_root_with_read_only_root(node_cluster: tuple[ControlPlane, RealNode]) -> None:
    cp, node = node_cluster
    create(cp, pod("pause-restricted", PAUSE_IMAGE, security=RESTRICTED_CONTAINER_SECURITY))
    found = wait_pod_ready(cp, "pause-restricted")
    assert found["spec"]["nodeName"] == node.name
    assert container_status(found)["state"].get("running") is not None


def test_security_context_is_enforced_by_the_kernel(node_cluster: tuple[ControlPlane, RealNode]) -> None:
    cp, _ = node_cluster
    create(cp, pod("echo-restricted", ECHO_IMAGE, security={**RESTRICTED_CONTAINER_SECURITY, "runAsUser": 1234}))
    pod_ip = wait_pod_ready(cp, "echo-restricted")["status"]["podIP"]
    seen = json.loads(
        poll_until(lambda: http_get(f"http://{pod_ip}:8080/self"), timeout=60, what="the echo pod to answer")
    )
    assert seen["uid"] == "1234"
    assert seen["cap_eff"] == "0000000000000000"
    assert seen["no_new_privs"] == "1"
    assert seen["seccomp"] == "2"  # filter mode: RuntimeDefault
    assert "read-only file system" in seen["write_root_error"]
    # The API server reaches the kubelet (InternalIP, its client certificate, the kubelet's webhook authz).
    assert "echo: listening on :8080 as uid 1234" in cp.kubectl("logs", "echo-restricted").stdout


def test_one_real_node_per_machine(node_cluster: tuple[ControlPlane, RealNode]) -> None:
    with pytest.raises(HostBusy), host_lock(timeout=1.0):
        pass


def test_root_container_refused_when_run_as_non_root(node_cluster: tuple[ControlPlane, RealNode]) -> None:
    cp, _ = node_cluster
    create(cp, pod("echo-as-root", ECHO_IMAGE, security={"runAsNonRoot": True, "runAsUser": 0}))

    def refused() -> JSON | None:
        waiting = container_status(get_pod(cp, "echo-as-root")).get("state", {}).get("waiting", {})
        return waiting if waiting.get("reason") == "CreateContainerConfigError" else None

    waiting = poll_until(refused, timeout=120, what="the kubelet to refuse a root container")
    assert "non-root" in waiting["message"]


def test_deployment_behind_a_service_is_balanced_by_kube_proxy(
    request: pytest.FixtureRequest, node_cluster: tuple[ControlPlane, RealNode]
) -> None:
    cp, _ = node_cluster
    began = time.monotonic()
    create(cp, deployment("echo", ECHO_IMAGE, 2))
    create(cp, service("echo"))
    poll_until(
        lambda: cp.api("GET", "/apis/apps/v1/namespaces/default/deployments/echo")["status"].get("readyReplicas") == 2,
        timeout=180,
        what="2 ready replicas",
    )
    record_timing(request.config, "Deployment (2 replicas) Ready", time.monotonic() - began)
    pods = cp.api("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Decho")["items"]
    names = {p["metadata"]["name"] for p in pods}
    assert len(names) == 2
    cluster_ip = cp.api("GET", "/api/v1/namespaces/default/services/echo")["spec"]["clusterIP"]
    answered: set[str] = set()

    def both_answered() -> bool:
        with contextlib.suppress(OSError):  # kube-proxy may not have synced the Service's rules yet
            answered.add(http_get(f"http://{cluster_ip}:80/").strip())
        return answered == names

    poll_until(both_answered, timeout=120, interval=0.05, what=f"both pods to answer on {cluster_ip}")
    assert answered == names


def test_exited_container_is_restarted_by_the_kubelet(node_cluster: tuple[ControlPlane, RealNode]) -> None:
    cp, _ = node_cluster
    create(cp, pod("echo-exits", ECHO_IMAGE, security={**RESTRICTED_CONTAINER_SECURITY, "runAsUser": 1000}))
    pod_ip = wait_pod_ready(cp, "echo-exits")["status"]["podIP"]
    assert container_status(get_pod(cp, "echo-exits"))["restartCount"] == 0
    poll_until(lambda: http_post(f"http://{pod_ip}:8080/exit"), timeout=60, what="the echo pod to answer")

    def restarted() -> JSON | None:
        status = container_status(get_pod(cp, "echo-exits"))
        return status if status.get("restartCount", 0) >= 1 and status.get("ready") else None

    status = poll_until(restarted, timeout=180, what="the kubelet to restart the container")
    assert status["lastState"]["terminated"]["exitCode"] == 3
    # Same pod (and address), new process: it answers again once it listens.
    reply = poll_until(lambda: http_get(f"http://{pod_ip}:8080/"), timeout=60, what="the restarted container")
    assert reply.strip() == "echo-exits"


def test_gpu_requesting_pods_schedule_on_the_advertised_capacity(
    node_cluster: tuple[ControlPlane, RealNode],
) -> None:
    cp, node = node_cluster
    gpu = {"limits": {GPU_RESOURCE: "1"}}
    create(cp, pod("gpu-0", PAUSE_IMAGE, security=RESTRICTED_CONTAINER_SECURITY, resources=gpu))
    assert wait_pod_ready(cp, "gpu-0")["spec"]["nodeName"] == node.name
    # The node advertises one: a second pod asking for one cannot be placed while the first holds it.
    create(cp, pod("gpu-1", PAUSE_IMAGE, security=RESTRICTED_CONTAINER_SECURITY, resources=gpu))

    def unschedulable() -> JSON | None:
        conditions = get_pod(cp, "gpu-1").get("status", {}).get("conditions", [])
        return next((c for c in conditions if c.get("reason") == "Unschedulable"), None)

    condition = poll_until(unschedulable, timeout=120, what="gpu-1 to be reported Unschedulable")
    assert GPU_RESOURCE in condition["message"]


def test_pods_reach_services_and_the_api_server_through_kube_proxy(
    node_cluster: tuple[ControlPlane, RealNode],
) -> None:
    cp, _ = node_cluster
    create(cp, deployment("backend", ECHO_IMAGE, 2))
    create(cp, service("backend"))
    create(cp, pod("client", ECHO_IMAGE, security={**RESTRICTED_CONTAINER_SECURITY, "runAsUser": 1000}))
    client_ip = wait_pod_ready(cp, "client")["status"]["podIP"]
    poll_until(
        lambda: (
            cp.api("GET", "/apis/apps/v1/namespaces/default/deployments/backend")["status"].get("readyReplicas") == 2
        ),
        timeout=180,
        what="2 ready backend replicas",
    )
    backends = {
        p["metadata"]["name"]
        for p in cp.api("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dbackend")["items"]
    }
    backend_ip = cp.api("GET", "/api/v1/namespaces/default/services/backend")["spec"]["clusterIP"]
    answered: set[str] = set()
    errors: list[str] = []

    def both_answered() -> bool:
        try:
            reply = http_get(f"http://{client_ip}:8080/get?url=http://{backend_ip}:80/", timeout=10).strip()
        except urllib.error.HTTPError as exc:  # the client pod's 502 says what its request met
            errors.append(f"{exc.code}: {exc.read()[:300].decode(errors='replace')}")
            return False
        except OSError as exc:  # kube-proxy may not have synced the Service's rules yet
            errors.append(repr(exc))
            return False
        answered.add(reply)  # a 200 from the client pod is a backend's whole, non-empty 200 answer
        return answered == backends

    def seen() -> str:
        slices = cp.api("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices")["items"]
        endpoints = [(e.get("addresses"), e.get("conditions")) for s in slices for e in s.get("endpoints") or []]
        return f"answered {sorted(answered)} of {sorted(backends)}; last errors {errors[-3:]}; endpoints {endpoints}"

    poll_until(
        both_answered, timeout=120, interval=0.05, what=f"both backends to answer a pod on {backend_ip}", detail=seen
    )
    print(f"requests that failed before both backends answered: {errors}")
    # The `kubernetes` Service leads to the API server's advertised (routable) address.
    api_ip = cp.api("GET", "/api/v1/namespaces/default/services/kubernetes")["spec"]["clusterIP"]
    reply = poll_until(
        lambda: http_get(f"http://{client_ip}:8080/dial?addr={api_ip}:443", timeout=10),
        timeout=60,
        what="a pod to reach the API server",
    )
    assert reply.strip() == "ok"
