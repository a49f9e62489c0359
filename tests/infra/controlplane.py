"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and kwok faking the nodes (and the kubelet's pod lifecycle) on which pods get scheduled.

    with ControlPlane() as cp:
        cp.kubectl("get", "nodes")
        kubeconfig = cp.service_account_kubeconfig("ensemble-system", "ensemble-operator")

CustomResourceDefinitions passed as `crds` are created (and Established) before the controller-manager
starts. Its garbage collector reads the API's resources once at start and then only every 30 s; an object of
a kind it has not discovered yet is tracked as a "virtual" owner whose REST mapping fails, retried with
exponential backoff, so children of such an owner deleted in that window are collected only at the next
retry, 40 s to minutes later. On a real cluster CRDs exist long before their objects; here they do too.

For a real node (tests/infra/node.py) pass `routable_address` (an address of this host that pods can route
to): the API server then listens on every address and advertises that one (so the `kubernetes` Service
leads pods to it), reaches kubelets at their InternalIP, and presents a client certificate to them (logs,
exec). Without it everything stays on 127.0.0.1.

kwok gives pods IPs from `pod_cidr` (default 10.244.0.0/16, which nothing answers); a loopback range
(e.g. 127.64.0.0/16) makes every pod IP reach a process listening on 0.0.0.0 here (bench/operator_scale.py).

Everything lives in one temporary directory (certificates, kubeconfigs, etcd data, one log file per
component); it is removed on exit unless `keep_workdir=True` (or the `workdir` was given by the caller).
"""

from __future__ import annotations

import functools
import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import yaml

from tests.infra import components
from tests.infra.api import JSON, ApiError, KubeApi
from tests.infra.certs import ClusterPKIFiles, generate_cluster_pki, write_cluster_pki
from tests.infra.cli import CommandError, run_cli
from tests.infra.kubeconfig import client_cert_kubeconfig, token_kubeconfig, write_kubeconfig
from tests.infra.process import (
    ManagedProcess,
    StartupError,
    http_status,
    insecure_tls_context,
    poll_until,
)
from tests.infra.tools import ToolLocator
from tests.support.ports import free_ports


@dataclass(frozen=True)
class FakeNode:
    """A node that kwok keeps Ready; its capacity is what the scheduler sees."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    )

    def manifest(self) -> JSON:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    components.KWOK_NODE_ANNOTATION: components.KWOK_NODE_ANNOTATION_VALUE,
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "status": {"capacity": dict(self.capacity), "allocatable": dict(self.capacity)},
        }


GPU_NODE = FakeNode(
    name="kwok-gpu-0",
    labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    capacity={
        "cpu": "16",
        "memory": "64Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "1",
    },
)
CPU_NODE = FakeNode(name="kwok-cpu-0")
DEFAULT_NODES = (GPU_NODE, CPU_NODE)
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok, as a context manager."""

    def __init__(
        self,
        *,
        nodes: Sequence[FakeNode] = DEFAULT_NODES,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        startup_timeout: float = 180.0,
        locator: ToolLocator | None = None,
        extra_apiserver_args: Sequence[str] = (),
        crds: Sequence[Path] = (),
        routable_address: str | None = None,
        pod_cidr: str = components.POD_CIDR,
    ) -> None:
        self._nodes = tuple(nodes)
        self._given_workdir = workdir
        self._keep_workdir = keep_workdir or workdir is not None
        self._startup_timeout = startup_timeout
        self._locator = locator or ToolLocator.from_env()
        self._extra_apiserver_args = tuple(extra_apiserver_args)
        self._crds = tuple(crds)
        self._routable_address = routable_address
        self._pod_cidr = pod_cidr
        self._processes: list[ManagedProcess] = []
        self._workdir: Path | None = None
        self._pki: ClusterPKIFiles | None = None
        self._ports: components.Ports | None = None
        self._kubeconfigs: components.Kubeconfigs | None = None
        self._api: KubeApi | None = None

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        binaries = {
            name: self._locator.binary(name)
            for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
        }
        stages = components.kwok_stages(self._locator.kwok_stages_dir())
        self._workdir = self._given_workdir or Path(tempfile.mkdtemp(prefix="ensemble-controlplane-"))
        self._workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start(binaries, stages)
        except BaseException:
            self._keep_workdir = True  # the error message points at the logs in it
            self.stop()
            raise

    def _start(self, binaries: Mapping[str, Path], stages: str) -> None:
        workdir = self.workdir
        pki = self._pki = write_cluster_pki(generate_cluster_pki(), workdir / "pki")
        ports = self._ports = components.Ports(*free_ports(6))
        kubeconfigs = self._kubeconfigs = self._write_kubeconfigs(pki)
        self._api = KubeApi(self.api_url, pki.ca.cert, pki.admin.cert, pki.admin.key)
        logs = workdir / "logs"

        etcd = self._spawn("etcd", components.etcd_argv(binaries["etcd"], workdir / "etcd", ports), logs)
        self._wait_healthy(etcd, f"http://127.0.0.1:{ports.etcd_client}/health", None)

        apiserver = self._spawn(
            "kube-apiserver",
            [
                *components.apiserver_argv(binaries["kube-apiserver"], pki, ports, workdir / "apiserver-certs"),
                *self._node_access_args(pki),
                *self._extra_apiserver_args,
            ],
            logs,
        )
        self._wait_healthy(apiserver, f"{self.api_url}/readyz", self._api.ready_context)
        self._create_crds()

        kcm = self._spawn(
            "kube-controller-manager",
            components.controller_manager_argv(
                binaries["kube-controller-manager"],
                pki,
                kubeconfigs.controller_manager,
                ports,
                workdir / "controller-manager-certs",
            ),
            logs,
        )
        scheduler = self._spawn(
            "kube-scheduler",
            components.scheduler_argv(binaries["kube-scheduler"], kubeconfigs.scheduler, ports),
            logs,
        )
        stages_file = workdir / "kwok-stages.yaml"
        stages_file.write_text(stages)
        kwok = self._spawn("kwok", components.kwok_argv(binaries["kwok"], kubeconfigs.kwok, stages_file, ports, self._pod_cidr), logs)
        insecure = insecure_tls_context()
        self._wait_healthy(kcm, f"https://127.0.0.1:{ports.controller_manager}/healthz", insecure)
        self._wait_healthy(scheduler, f"https://127.0.0.1:{ports.scheduler}/healthz", insecure)
        self._wait_healthy(kwok, f"http://127.0.0.1:{ports.kwok}/healthz", None)

        for node in self._nodes:
            self.api("POST", "/api/v1/nodes", node.manifest())
        for node in self._nodes:
            poll_until(
                functools.partial(self.node_ready, node.name),
                timeout=self._startup_timeout,
                what=f"node {node.name} to become Ready",
                alive=self._processes,
                detail=lambda: kwok.log_tail(),
            )
        # Pods need the namespace's "default" ServiceAccount, which the controller-manager creates.
        poll_until(
            lambda: self.api_client.exists("/api/v1/namespaces/default/serviceaccounts/default"),
            timeout=self._startup_timeout,
            what="the default ServiceAccount",
            alive=self._processes,
            detail=lambda: kcm.log_tail(),
        )

    def _node_access_args(self, pki: ClusterPKIFiles) -> list[str]:
        if self._routable_address is None:
            return []
        return [
            f"--advertise-address={self._routable_address}",
            "--bind-address=0.0.0.0",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki.admin.cert}",
            f"--kubelet-client-key={pki.admin.key}",
        ]

    def stop(self) -> None:
        """Stop every component (last started first) and remove the work directory unless kept."""
        for proc in reversed(self._processes):
            proc.stop()
        self._processes.clear()
        if self._workdir is not None and not self._keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def _spawn(self, name: str, argv: Sequence[str], logs: Path) -> ManagedProcess:
        proc = ManagedProcess(name, argv, logs / f"{name}.log", env=self._component_env())
        self._processes.append(proc)
        proc.start()
        return proc

    def _component_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["HOME"] = str(self.workdir)  # kwok reads ~/.kwok; keep the real home out of it
        return env

    def _wait_healthy(self, proc: ManagedProcess, url: str, context: ssl.SSLContext | None) -> None:
        poll_until(
            lambda: http_status(url, context=context) == 200,
            timeout=self._startup_timeout,
            what=f"{proc.name} at {url}",
            alive=self._processes,
            detail=lambda: f"last lines of {proc.log_path}:\n{proc.log_tail()}",
        )

    def _create_crds(self) -> None:
        """Create `crds` and wait until each is Established (before the controller-manager starts)."""
        names = []
        for path in self._crds:
            for document in yaml.safe_load_all(path.read_text()):
                if document:
                    self.api("POST", CRD_PATH, document)
                    names.append(document["metadata"]["name"])
        for name in names:
            poll_until(
                functools.partial(self.crd_established, name),
                timeout=self._startup_timeout,
                what=f"CustomResourceDefinition {name} to be Established",
                alive=self._processes,
            )

    def crd_established(self, name: str) -> bool:
        conditions = self.api("GET", f"{CRD_PATH}/{name}").get("status", {}).get("conditions", [])
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def _write_kubeconfigs(self, pki: ClusterPKIFiles) -> components.Kubeconfigs:
        directory = self.workdir / "kubeconfigs"

        def write(name: str, user: str, cert: Path, key: Path) -> Path:
            config = client_cert_kubeconfig(
                self.api_url, pki.ca.cert.read_bytes(), cert.read_bytes(), key.read_bytes(), user=user
            )
            return write_kubeconfig(directory / f"{name}.kubeconfig", config)

        return components.Kubeconfigs(
            admin=write("admin", "kubernetes-admin", pki.admin.cert, pki.admin.key),
            controller_manager=write(
                "controller-manager",
                "system:kube-controller-manager",
                pki.controller_manager.cert,
                pki.controller_manager.key,
            ),
            scheduler=write("scheduler", "system:kube-scheduler", pki.scheduler.cert, pki.scheduler.key),
            kwok=write("kwok", "kwok", pki.kwok.cert, pki.kwok.key),
        )

    # ---------------------------------------------------------------- accessors

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("control plane is not started")
        return self._workdir

    @property
    def api_url(self) -> str:
        if self._ports is None:
            raise RuntimeError("control plane is not started")
        return f"https://127.0.0.1:{self._ports.apiserver}"

    @property
    def kubeconfig_path(self) -> Path:
        """Admin (system:masters) kubeconfig."""
        if self._kubeconfigs is None:
            raise RuntimeError("control plane is not started")
        return self._kubeconfigs.admin

    @property
    def ca_cert_path(self) -> Path:
        if self._pki is None:
            raise RuntimeError("control plane is not started")
        return self._pki.ca.cert

    @property
    def pki(self) -> ClusterPKIFiles:
        """The cluster's certificate files (the CA's key signs a real node's certificates)."""
        if self._pki is None:
            raise RuntimeError("control plane is not started")
        return self._pki

    @property
    def api_client(self) -> KubeApi:
        """Admin REST client."""
        if self._api is None:
            raise RuntimeError("control plane is not started")
        return self._api

    @property
    def processes(self) -> Mapping[str, ManagedProcess]:
        return {p.name: p for p in self._processes}

    def logs(self, component: str, lines: int = 100) -> str:
        """Last lines of a component's log (etcd, kube-apiserver, kube-controller-manager, ...)."""
        return self.processes[component].log_tail(lines)

    # ---------------------------------------------------------------- API access

    def api(self, method: str, path: str, body: JSON | None = None, *, token: str | None = None) -> JSON:
        """One request to the API server as admin (or with a bearer `token`); JSON in, JSON out."""
        if self._api is None:
            raise RuntimeError("control plane is not started")
        return self._api.request(method, path, body, token=token)

    def node_ready(self, name: str) -> bool:
        node = self.api("GET", f"/api/v1/nodes/{name}")
        conditions = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def create_token(self, namespace: str, service_account: str, *, expiration_seconds: int = 3600) -> str:
        """A token for a ServiceAccount, via the TokenRequest API."""
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        token: str = self.api("POST", path, request)["status"]["token"]
        return token

    def service_account_kubeconfig(
        self,
        namespace: str,
        service_account: str,
        *,
        path: Path | None = None,
        expiration_seconds: int = 3600,
    ) -> Path:
        """A kubeconfig acting as the ServiceAccount (e.g. the chart's), so code runs with its RBAC only."""
        token = self.create_token(namespace, service_account, expiration_seconds=expiration_seconds)
        config = token_kubeconfig(
            self.api_url,
            self.ca_cert_path.read_bytes(),
            token,
            user=f"system:serviceaccount:{namespace}:{service_account}",
            namespace=namespace,
        )
        path = path or self.workdir / "kubeconfigs" / f"sa-{namespace}-{service_account}.kubeconfig"
        return write_kubeconfig(path, config)

    # ---------------------------------------------------------------- CLIs

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster (admin unless `kubeconfig` is given)."""
        return run_cli(
            self._locator.binary("kubectl"),
            args,
            env={"KUBECONFIG": str(kubeconfig or self.kubeconfig_path)},
            input=input,
            check=check,
            timeout=timeout,
        )

    def helm(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 300.0,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built helm (v4) against this cluster, with its config/cache/data kept in the workdir."""
        helm_home = self.workdir / "helm"
        return run_cli(
            self._locator.binary("helm"),
            args,
            env={
                "KUBECONFIG": str(kubeconfig or self.kubeconfig_path),
                "HELM_CONFIG_HOME": str(helm_home / "config"),
                "HELM_CACHE_HOME": str(helm_home / "cache"),
                "HELM_DATA_HOME": str(helm_home / "data"),
            },
            input=input,
            check=check,
            timeout=timeout,
        )


__all__ = [
    "CPU_NODE",
    "DEFAULT_NODES",
    "GPU_NODE",
    "ApiError",
    "CommandError",
    "ControlPlane",
    "FakeNode",
    "StartupError",
]
