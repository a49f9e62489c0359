"""The whole system on a real node: a control plane that pods can route to, a RealNode (containerd, kubelet,
kube-proxy, CNI bridge) with the project's runtime and operator images imported, MinIO on the node's
routable address, and the chart installed with `helm install` as a user would: the operator runs in the
cluster as the chart's Deployment (its webhooks reached by the API server through the chart's Service) and
the runtime pods run the built runtime image, with the securityContext, probes, resources and PDB the chart
and the operator give them.

No registry: the images are imported into the node's containerd under their `localhost/...:<key>`
references and the pods use them with `imagePullPolicy: IfNotPresent`. No cluster DNS: the Models' S3
endpoint is MinIO's IP, and clients reach an Ensemble through its Service's ClusterIP (kube-proxy's rules
apply on the host too) or its pods' IPs (the host routes to the pod subnet over the CNI bridge).
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2e.scenario import pods_of
from tests.infra.controlplane import ControlPlane
from tests.infra.images import ImageArtifact
from tests.infra.minio import MinioServer
from tests.infra.node import RealNode
from tests.infra.node_images import ImageArchive
from tests.infra.process import poll_until
from tests.integration.operator.support import (
    CHART,
    FULLNAME,
    RELEASE,
    RELEASE_NAMESPACE,
    ensemble,
    helm_values_file,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

JSON = dict[str, Any]

# The node has the machine's cores (2 here) and the scenarios ask 1-2 CPUs per replica: a rollout with a
# surge pod (and the operator's pod) would not fit. The runtime pods ask this much instead; memory requests
# and limits stay as the manifests give them (the kernel enforces the limit).
RUNTIME_CPU_REQUEST = "250m"
# Each GPU scenario asks one nvidia.com/gpu per replica at 2 replicas (the pods run the CPU fallback); the demo
# (e2e/tests/test_demo.py) runs two GPU Ensembles at once, 3 replicas.
NODE_GPUS = 4
# The chart's minimum (statusIntervalSeconds >= 5); the tests wait on servedVersions in the status.
STATUS_INTERVAL_SECONDS = 5


def node_archive(artifact: ImageArtifact) -> ImageArchive:
    """A `make images` tarball as the node imports it (`ctr images import`, tagged with its reference)."""
    return ImageArchive(artifact.tarball, artifact.reference)


def chart_values(runtime: ImageArtifact, operator: ImageArtifact) -> JSON:
    """Helm values for the built images on a registry-less node; everything else is the chart's default
    (securityContext, probes, resources, webhook through its Service, control-key Secret)."""
    return {
        "replicaCount": 1,
        "image": {"repository": operator.repository, "tag": operator.tag, "pullPolicy": "IfNotPresent"},
        "runtime": {"image": runtime.reference, "imagePullPolicy": "IfNotPresent"},
        "statusIntervalSeconds": STATUS_INTERVAL_SECONDS,
    }


def fit_to_node(documents: Iterable[JSON], cpu: str = RUNTIME_CPU_REQUEST) -> list[JSON]:
    """The scenario's documents with each Ensemble's CPU request set to `cpu` (copies; others unchanged)."""
    fitted = [copy.deepcopy(doc) for doc in documents]
    for doc in fitted:
        if doc.get("kind") == "Ensemble":
            requests = doc["spec"].setdefault("resources", {}).setdefault("requests", {})
            requests["cpu"] = cpu
    return fitted


def install_chart(cp: ControlPlane, workdir: Path, values: Mapping[str, Any], timeout_s: int = 300) -> None:
    """`helm install --wait`: returns once the operator's Deployment is Ready (its readiness probe answers,
    so its webhook server listens behind the chart's Service)."""
    cp.helm(
        "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
        "-f", str(helm_values_file(workdir, values)), "--wait", "--timeout", f"{timeout_s}s",
    )  # fmt: skip
    # Ready is not yet reachable: kube-proxy may not have written the Service's rules, and the API server
    # calls the webhook through them. Wait until its ClusterIP accepts a connection, as the API server's will.
    service = cp.api("GET", f"/api/v1/namespaces/{RELEASE_NAMESPACE}/services/{FULLNAME}-webhook")
    address = (service["spec"]["clusterIP"], int(service["spec"]["ports"][0]["port"]))
    poll_until(lambda: _accepts(address), timeout=timeout_s, what=f"the webhook Service at {address[0]}:{address[1]}")


def _accepts(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2):
            return True
    except OSError:
        return False


@dataclass
class RealStack:
    cp: ControlPlane
    node: RealNode
    minio: MinioServer
    runtime_image: ImageArtifact
    operator_image: ImageArtifact
    s3: S3Client = field(init=False)

    def __post_init__(self) -> None:
        self.s3 = self.minio.boto3_client()

    def documents(self, folder: str) -> list[JSON]:
        from ensemble_examples.manifests import scenario_documents

        docs = scenario_documents(
            folder,
            s3_endpoint_url=self.minio.endpoint_url,
            access_key_id=self.minio.access_key,
            secret_access_key=self.minio.secret_key,
        )
        return fit_to_node(docs)

    def node_info(self) -> JSON:
        info: JSON = self.node.node()["status"]["nodeInfo"]
        return info

    def operator_log(self, tail: int = 60) -> str:
        result = self.cp.kubectl(
            "logs", "-n", RELEASE_NAMESPACE, f"deployment/{FULLNAME}", f"--tail={tail}", check=False
        )
        return str(result.stdout + result.stderr)

    def container_log(self, ns: str, pod: str, container: str = "runtime", tail: int = 40) -> str:
        result = self.cp.kubectl("logs", "-n", ns, pod, "-c", container, f"--tail={tail}", check=False)
        return str(result.stdout + result.stderr)

    def service_ip(self, ns: str, name: str) -> str:
        ip: str = self.cp.api("GET", f"/api/v1/namespaces/{ns}/services/{name}")["spec"]["clusterIP"]
        return ip

    def diagnostics(self, ns: str, name: str) -> str:
        """The Ensemble's status, its pods (status and runtime log tail), the namespace's recent events and
        the operator's log tail."""
        obj = ensemble(self.cp, ns, name)
        lines = [f"status: {json.dumps((obj or {}).get('status'))}"]
        for pod in pods_of(self.cp, ns, name):
            pod_name = pod["metadata"]["name"]
            lines.append(f"--- pod {pod_name}: {json.dumps(pod.get('status', {}))[:1500]}")
            lines.append(self.container_log(ns, pod_name)[-2500:])
        events = self.cp.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False).stdout
        lines.append("--- events\n" + str(events)[-2500:])
        lines.append("--- operator\n" + self.operator_log()[-2500:])
        return "\n".join(lines)

    def container_id(self, ns: str, pod: str, container: str = "runtime") -> str:
        """The containerd id of `container`'s current instance in `pod` (from the pod's status)."""
        found = self.cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")
        statuses = found.get("status", {}).get("containerStatuses", [])
        status = next(s for s in statuses if s["name"] == container)
        runtime, _, cid = str(status["containerID"]).partition("://")
        if runtime != "containerd" or not cid:
            raise RuntimeError(f"unexpected containerID {status['containerID']!r} of {ns}/{pod}/{container}")
        return cid

    def kill_container(self, ns: str, pod: str, container: str = "runtime") -> None:
        """SIGKILL to the container's main process, through containerd (as the kernel's OOM killer would)."""
        self.node.ctr("tasks", "kill", "--signal", "SIGKILL", self.container_id(ns, pod, container))

    def tag_runtime_image(self, suffix: str) -> str:
        """A second reference to the imported runtime image (same repository, tag `<key><suffix>`): a new
        image for an Ensemble to roll to, allowed by the chart's default (the runtime image's repository)."""
        reference = f"{self.runtime_image.repository}:{self.runtime_image.tag}{suffix}"
        if reference not in self.node.ctr("images", "list", "--quiet").stdout.split():
            self.node.ctr("images", "tag", self.runtime_image.reference, reference)
        return reference
