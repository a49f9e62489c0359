"""Where the demo deploys: the embedded cluster the tests build (a control plane, a real node with the images
imported, MinIO on the host's routable address), or, opt-in, a cluster of the user's (`--kubeconfig`), with
images they pushed to a registry it pulls from and an S3 endpoint both it and this machine reach.

Either way the demo only talks to the cluster through `kubectl` and `helm` (`Kube`), as a user would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from demo.progress import Progress
from tests.infra.cli import run_cli
from tests.infra.controlplane import ControlPlane
from tests.infra.images import ImageArtifact
from tests.infra.minio import MinioServer
from tests.infra.node import RealNode
from tests.infra.node_host import primary_ipv4
from tests.infra.node_images import ImageArchive
from tests.infra.tools import ToolLocator

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Fake GPUs the embedded node advertises (nvidia.com/gpu): the example Ensembles ask one per replica and their
# pods run the CPU fallback.
EMBEDDED_GPUS = 8


class _QuotedStrings(yaml.SafeDumper):
    """Every string double-quoted: kubectl reads YAML 1.1, where bare `Y` is a boolean and `-0123456789` a
    number (PyYAML, YAML 1.1 too but another reading of it, writes both bare)."""


_QuotedStrings.add_representer(str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"'))


def manifest_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """`docs` as a multi-document YAML file kubectl reads back exactly."""
    return yaml.dump_all([dict(doc) for doc in docs], Dumper=_QuotedStrings, sort_keys=False)


@dataclass(frozen=True, slots=True)
class Kube:
    """kubectl and helm against one cluster."""

    kubectl_binary: Path
    helm_binary: Path
    kubeconfig: Path
    helm_home: Path

    def _env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CONFIG_HOME": str(self.helm_home / "config"),
            "HELM_CACHE_HOME": str(self.helm_home / "cache"),
            "HELM_DATA_HOME": str(self.helm_home / "data"),
        }

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60.0, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(self.kubectl_binary, args, env=self._env(), input=input, check=check, timeout=timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return run_cli(self.helm_binary, args, env=self._env(), check=check, timeout=timeout)

    def stream(self, *args: str) -> subprocess.Popen[str]:
        """`kubectl args` with its output readable line by line as it comes (e.g. `logs -f`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "HELM_"))}
        env.update(self._env())
        return subprocess.Popen(
            [str(self.kubectl_binary), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )


@dataclass(frozen=True, slots=True)
class S3Repository:
    endpoint_url: str  # as the cluster's pods reach it (and this machine, which uploads)
    bucket: str
    access_key: str
    secret_key: str

    def client(self) -> S3Client:
        import boto3
        from botocore.config import Config

        client: S3Client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 3}, connect_timeout=5),
        )
        return client


@dataclass(frozen=True, slots=True)
class Target:
    """A cluster to deploy to and what the deployment uses."""

    kube: Kube
    runtime_image: str  # reference the pods run
    operator_image: tuple[str, str]  # repository, tag
    pull_policy: str
    s3: S3Repository
    embedded: bool
    services_reachable: bool  # whether this machine reaches ClusterIPs (kube-proxy's rules on the host)
    description: str


@contextmanager
def embedded(progress: Progress, locator: ToolLocator, runtime: ImageArtifact, operator: ImageArtifact,
             workdir: Path) -> Iterator[Target]:
    """Control plane + MinIO + a real node with both images imported; all stopped when the block ends."""
    address = primary_ipv4()
    with ExitStack() as stack:
        with progress.ticking("control plane (etcd, kube-apiserver, controller-manager, scheduler)", 20):
            cp = stack.enter_context(ControlPlane(nodes=(), routable_address=address, locator=locator))
        with progress.ticking(f"MinIO on {address}", 5):
            minio = stack.enter_context(MinioServer(locator=locator, host=address))
        archives = [ImageArchive(a.tarball, a.reference) for a in (runtime, operator)]
        with progress.ticking("real node (containerd, kubelet, kube-proxy, CNI bridge) and image import", 35):
            node = stack.enter_context(RealNode(cp, images=archives, gpus=EMBEDDED_GPUS, locator=locator))
        info = node.node()["status"]["nodeInfo"]
        kube = Kube(locator.binary("kubectl"), locator.binary("helm"), cp.kubeconfig_path, workdir / "helm")
        yield Target(
            kube=kube,
            runtime_image=runtime.reference,
            operator_image=(operator.repository, operator.tag),
            pull_policy="IfNotPresent",
            s3=S3Repository(minio.endpoint_url, "models", minio.access_key, minio.secret_key),
            embedded=True,
            services_reachable=True,
            description=(
                f"node {node.name}: kubelet {info['kubeletVersion']}, {info['containerRuntimeVersion']}, "
                f"{EMBEDDED_GPUS} nvidia.com/gpu advertised (pods run the CPU fallback)"
            ),
        )


def _binary(name: str, locator: ToolLocator) -> Path:
    """The project's built `name` if there is one, else the one on PATH."""
    try:
        return locator.binary(name)
    except Exception:
        found = shutil.which(name)
        if found is None:
            raise SystemExit(f"--kubeconfig needs {name}: not built (make tools) and not on PATH") from None
        return Path(found)


def external(kubeconfig: Path, locator: ToolLocator, runtime_image: str, operator_image: str,
             s3: S3Repository) -> Target:
    """A cluster of the user's: images they pushed, an S3 endpoint they run."""
    repository, _, tag = operator_image.rpartition(":")
    if not repository or "/" in tag:
        raise SystemExit(f"--operator-image {operator_image!r}: give repository:tag")
    helm_home = Path(tempfile.mkdtemp(prefix="ensemble-demo-helm-"))
    kube = Kube(_binary("kubectl", locator), _binary("helm", locator), kubeconfig, helm_home)
    return Target(
        kube=kube,
        runtime_image=runtime_image,
        operator_image=(repository, tag),
        pull_policy="IfNotPresent",
        s3=s3,
        embedded=False,
        services_reachable=False,
        description=f"the cluster of {kubeconfig}",
    )


def chart_values(target: Target, status_interval_s: int) -> dict[str, Any]:
    repository, tag = target.operator_image
    return {
        "replicaCount": 1,
        "image": {"repository": repository, "tag": tag, "pullPolicy": target.pull_policy},
        "runtime": {"image": target.runtime_image, "imagePullPolicy": target.pull_policy},
        "statusIntervalSeconds": status_interval_s,
    }


def documents_for(folders: Sequence[str], s3: S3Repository, replicas: Mapping[str, int], cpu: str) -> list[dict[str, Any]]:
    """The example scenarios' Models and Ensembles pointed at `s3`, each object once, Ensembles with the given
    replicas and CPU request (the embedded node has 2 cores)."""
    from ensemble_examples.manifests import scenario_documents

    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for folder in folders:
        for doc in scenario_documents(
            folder, s3_endpoint_url=s3.endpoint_url, access_key_id=s3.access_key, secret_access_key=s3.secret_key
        ):
            if doc.get("kind") == "Ensemble":
                name = doc["metadata"]["name"]
                doc["spec"]["replicas"] = replicas.get(name, doc["spec"].get("replicas", 1))
                doc["spec"].setdefault("resources", {}).setdefault("requests", {})["cpu"] = cpu
            if doc.get("kind") == "Model" and s3.bucket != "models":
                doc["spec"]["source"] = doc["spec"]["source"].replace("s3://models/", f"s3://{s3.bucket}/", 1)
            seen[(doc["kind"], doc["metadata"]["name"])] = doc
    return list(seen.values())
