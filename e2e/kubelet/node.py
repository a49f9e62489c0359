"""The Node object: registration, status (capacity, Ready condition) and the heartbeat Lease."""

from __future__ import annotations

import datetime
import logging
import platform
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from .api import JSON, MERGE_PATCH, ApiError, KubeClient
from .status import now_rfc3339

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
KUBELET_VERSION = "v0.0.0-e2e-standin"


@dataclass(frozen=True)
class NodeSpec:
    """The node the stand-in registers: what the scheduler sees."""

    name: str = "e2e-gpu-0"
    labels: Mapping[str, str] = field(
        default_factory=lambda: {
            "nvidia.com/gpu.present": "true",
            "ensemble.e2e/kubelet": "stand-in",
        }
    )
    capacity: Mapping[str, str] = field(
        default_factory=lambda: {
            "cpu": "8",
            "memory": "32Gi",
            "pods": "110",
            "ephemeral-storage": "100Gi",
            "nvidia.com/gpu": "2",
        }
    )
    taints: tuple[JSON, ...] = ()
    address: str = "127.0.0.1"

    def manifest(self) -> JSON:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }
        spec: JSON = {"taints": list(self.taints)} if self.taints else {}
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": labels}, "spec": spec}


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Registers the node and keeps its Ready condition and Lease fresh from a background thread."""

    def __init__(self, client: KubeClient, spec: NodeSpec, heartbeat_seconds: float = 10.0) -> None:
        self._client = client
        self.spec = spec
        self._period = heartbeat_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"node {spec.name}", daemon=True)
        self._registered_at = now_rfc3339()
        self._uid = ""

    def start(self) -> None:
        self.register()
        self._thread.start()

    def register(self) -> None:
        manifest = self.spec.manifest()
        try:
            node = self._client.request("POST", "/api/v1/nodes", manifest)
        except ApiError as exc:
            if exc.status != 409:
                raise
            node = self._client.request(
                "PATCH",
                f"/api/v1/nodes/{self.spec.name}",
                {"metadata": manifest["metadata"], "spec": {"taints": list(self.spec.taints)}},
                content_type=MERGE_PATCH,
            )
        self._uid = node["metadata"]["uid"]
        self.heartbeat()

    def heartbeat(self) -> None:
        self._client.request(
            "PATCH", f"/api/v1/nodes/{self.spec.name}/status", {"status": self._status()}, content_type=MERGE_PATCH
        )
        self._renew_lease()

    def _status(self) -> JSON:
        now = now_rfc3339()

        def condition(kind: str, ok: bool, reason: str) -> JSON:
            return {
                "type": kind,
                "status": "True" if ok else "False",
                "reason": reason,
                "message": f"e2e kubelet stand-in: {reason}",
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._registered_at,
            }

        return {
            "capacity": dict(self.spec.capacity),
            "allocatable": dict(self.spec.capacity),
            "conditions": [
                condition("MemoryPressure", False, "KubeletHasSufficientMemory"),
                condition("DiskPressure", False, "KubeletHasNoDiskPressure"),
                condition("PIDPressure", False, "KubeletHasSufficientPID"),
                condition("Ready", True, "KubeletReady"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.spec.address},
                {"type": "Hostname", "address": self.spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": "e2e kubelet stand-in",
                "containerRuntimeVersion": "e2e://local-processes",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{self.spec.name}"
        spec = {"holderIdentity": self.spec.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_time()}
        try:
            self._client.request("PATCH", path, {"spec": spec}, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.spec.name, "uid": self._uid}
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.spec.name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec,
            }
            self._client.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", lease)

    def _beat(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self.heartbeat()
            except Exception:  # try again next period, as kubelet does
                log.exception("node heartbeat failed")

    def stop(self, deregister: bool) -> None:
        """Stop the heartbeat; with `deregister`, delete the Node (its Lease goes with it, by owner)."""
        self._stop.set()
        self._thread.join(30)
        if deregister:
            try:
                self._client.request("DELETE", f"/api/v1/nodes/{self.spec.name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
