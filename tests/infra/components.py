"""Command lines of the control-plane components (pure: paths and ports in, argv out)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.infra.certs import ClusterPKIFiles

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "DefaultTolerationSeconds",
    "Priority",
    "ResourceQuota",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
)
# The kwok stages applied: nodes become Ready and keep a lease; pods become Running/Ready, complete, delete.
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int


@dataclass(frozen=True)
class Kubeconfigs:
    admin: Path
    controller_manager: Path
    scheduler: Path
    kwok: Path


def etcd_argv(binary: Path, data_dir: Path, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",  # throwaway data: trade durability for speed
        "--log-level=warn",
    ]


def apiserver_argv(binary: Path, pki: ClusterPKIFiles, ports: Ports, cert_dir: Path) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--advertise-address=127.0.0.1",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        "--allow-privileged=true",
        f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
        f"--proxy-client-key-file={pki.front_proxy_client.key}",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(
    binary: Path, pki: ClusterPKIFiles, kubeconfig: Path, ports: Ports, cert_dir: Path
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={cert_dir}",
        "--controllers=*",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_argv(binary: Path, kubeconfig: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def kwok_argv(
    binary: Path, kubeconfig: Path, stages_file: Path, ports: Ports, pod_cidr: str = POD_CIDR
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages_file}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
        f"--cidr={pod_cidr}",
        "--node-ip=127.0.0.1",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{ports.kwok}",
    ]


def kwok_stages(stages_dir: Path) -> str:
    """The stage manifests concatenated into one multi-document YAML config for `kwok --config`."""
    documents = [(stages_dir / rel).read_text().strip() for rel in KWOK_STAGE_FILES]
    return "\n---\n".join(documents) + "\n"
