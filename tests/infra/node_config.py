"""What the real node's daemons are given (pure: paths, addresses and ports in; file texts and argv out).

The settings are the ones a VM of this project's kind needs (see docs in tests/infra/node.py): containerd
with `restrict_oom_score_adj` (the VM's capability bounding set lacks CAP_SYS_RESOURCE) and network
namespaces under its own state directory, cgroupfs everywhere (cgroup v1), a kubelet that neither evicts
test pods on a busy disk nor refuses cgroup v1 or swap, kube-proxy in iptables mode that leaves sysctls
alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CNI_NETWORK = "ensemble-node"
BRIDGE = "ensnode0"
POD_SUBNET = "10.86.0.0/24"
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class NodeLayout:
    """Where everything of the node lives: two fixed host-wide trees, so that a later run finds (and
    cleans) what a crashed one left, and nothing of another containerd on the machine is touched."""

    root: Path = Path("/var/lib/ensemble-node")  # on disk: images, snapshots, kubelet volumes, logs
    state: Path = Path("/run/ensemble-node")  # sockets, runc state, network namespaces

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.state / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.state / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.state / "runc"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"


@dataclass(frozen=True)
class NodePorts:
    kubelet: int
    kubelet_healthz: int
    proxy_healthz: int
    proxy_metrics: int


def containerd_config(layout: NodeLayout) -> str:
    """containerd v2 configuration (version 3)."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    images = "plugins.'io.containerd.cri.v1.images'"
    return f"""version = 3
root = '{layout.containerd_root}'
state = '{layout.containerd_state}'
disabled_plugins = [
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
]

[grpc]
  address = '{layout.containerd_socket}'

[ttrpc]
  address = ''

[{images}]
  snapshotter = 'overlayfs'

[{images}.pinned_images]
  sandbox = '{PAUSE_IMAGE}'

[{runtime}]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false

[{runtime}.containerd]
  default_runtime_name = 'runc'

[{runtime}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[{runtime}.containerd.runtimes.runc.options]
  Root = '{layout.runc_root}'
  SystemdCgroup = false

[{runtime}.cni]
  bin_dirs = ['{CNI_BIN_DIR}']
  conf_dir = '{layout.cni_conf_dir}'
  max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""


def cni_conflist(layout: NodeLayout) -> str:
    """A bridge network with host-local addresses (state kept in the node's tree), NAT out, loopback."""
    config = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_ipam_dir),
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def kubelet_config(
    layout: NodeLayout,
    ports: NodePorts,
    *,
    node_ip: str,
    ca_file: Path,
    tls_cert: Path,
    tls_key: Path,
) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "tlsCertFile": str(tls_cert),
        "tlsPrivateKeyFile": str(tls_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "podLogsDir": str(layout.pod_logs),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [],
        "resolvConf": "/etc/resolv.conf",
        "registerNode": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "serializeImagePulls": False,
        # A busy, shared 2-core VM with a fuller disk than a production node: evict nothing, collect no images.
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "shutdownGracePeriod": "0s",
        "containerLogMaxSize": "5Mi",
        "containerLogMaxFiles": 2,
    }
    return yaml.safe_dump(config, sort_keys=True)


def kubelet_argv(
    binary: Path, layout: NodeLayout, *, config: Path, kubeconfig: Path, node_name: str, node_ip: str
) -> list[str]:
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.pki_dir / 'kubelet'}",
        f"--hostname-override={node_name}",
        f"--node-ip={node_ip}",
        "--v=1",
    ]


def kube_proxy_config(ports: NodePorts, *, kubeconfig: Path, node_name: str) -> str:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{ports.proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{ports.proxy_metrics}",
        # Leave the host's sysctls alone: no conntrack table sizing or timeouts, no route_localnet.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "0s"},
    }
    return yaml.safe_dump(config, sort_keys=True)


def kube_proxy_argv(binary: Path, *, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", "--v=1"]


def containerd_argv(binary: Path, *, config: Path) -> list[str]:
    return [str(binary), f"--config={config}", "--log-level=warn"]
