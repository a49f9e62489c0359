"""Manifests and probes for the real-node tests (pure builders plus small API helpers)."""

from __future__ import annotations

import functools
import json
import urllib.request
from collections.abc import Mapping
from typing import Any

from tests.infra.controlplane import ControlPlane
from tests.infra.process import poll_until

JSON = dict[str, Any]

RESTRICTED_CONTAINER_SECURITY: JSON = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(
    name: str,
    image: str,
    *,
    namespace: str = "default",
    security: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    restart_policy: str = "Always",
) -> JSON:
    container: JSON = {"name": "main", "image": image, "imagePullPolicy": "Never"}
    if security is not None:
        container["securityContext"] = dict(security)
    if resources is not None:
        container["resources"] = dict(resources)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})},
        "spec": {
            "containers": [container],
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
        },
    }


def deployment(name: str, image: str, replicas: int, *, namespace: str = "default") -> JSON:
    template = pod(name, image, security={**RESTRICTED_CONTAINER_SECURITY, "runAsUser": 1000})
    container = template["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 8080}]
    container["readinessProbe"] = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }


def service(name: str, *, namespace: str = "default", port: int = 80, target_port: int = 8080) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"port": port, "targetPort": target_port}]},
    }


def create(cp: ControlPlane, manifest: JSON) -> JSON:
    kind = manifest["kind"]
    namespace = manifest["metadata"].get("namespace", "default")
    paths = {
        "Pod": f"/api/v1/namespaces/{namespace}/pods",
        "Service": f"/api/v1/namespaces/{namespace}/services",
        "Deployment": f"/apis/apps/v1/namespaces/{namespace}/deployments",
    }
    return cp.api("POST", paths[kind], manifest)


def get_pod(cp: ControlPlane, name: str, namespace: str = "default") -> JSON:
    return cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


def pod_ready(cp: ControlPlane, name: str, namespace: str = "default") -> JSON | None:
    """The pod when it is Running and Ready, else None."""
    found = get_pod(cp, name, namespace)
    conditions = found.get("status", {}).get("conditions", [])
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return found if ready else None


def wait_pod_ready(cp: ControlPlane, name: str, *, timeout: float = 180.0, namespace: str = "default") -> JSON:
    return poll_until(
        functools.partial(pod_ready, cp, name, namespace),
        timeout=timeout,
        what=f"pod {name} to be Ready",
        detail=lambda: json.dumps(get_pod(cp, name, namespace).get("status", {}), indent=1),
    )


def container_status(found: JSON) -> JSON:
    statuses: list[JSON] = found.get("status", {}).get("containerStatuses", [])
    return statuses[0] if statuses else {}


def http_get(url: str, *, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode()


def http_post(url: str, *, timeout: float = 5.0) -> str:
    request = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode()
