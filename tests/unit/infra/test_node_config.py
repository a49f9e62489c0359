"""The real node's daemon configurations carry the settings this machine's kind needs (pure builders)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from tests.infra import node_config
from tests.infra.node_config import NodeLayout, NodePorts

LAYOUT = NodeLayout(root=Path("/r"), state=Path("/s"))
PORTS = NodePorts(kubelet=1, kubelet_healthz=2, proxy_healthz=3, proxy_metrics=4)


def test_containerd_config_is_version_3_with_the_vm_settings() -> None:
    config = tomllib.loads(node_config.containerd_config(LAYOUT))
    assert config["version"] == 3
    assert (config["root"], config["state"]) == ("/r/containerd", "/s/containerd")
    assert config["grpc"]["address"] == "/s/containerd.sock"
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["snapshotter"] == "overlayfs"
    assert images["pinned_images"]["sandbox"] == node_config.PAUSE_IMAGE
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"Root": "/s/runc", "SystemdCgroup": False}
    assert runtime["cni"]["bin_dirs"] == [str(node_config.CNI_BIN_DIR)]
    assert runtime["cni"]["conf_dir"] == "/r/cni/net.d"


def test_cni_network_keeps_its_address_state_in_the_node_tree() -> None:
    bridge = json.loads(node_config.cni_conflist(LAYOUT))["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == node_config.BRIDGE
    assert bridge["ipam"]["dataDir"] == "/r/cni/ipam"
    assert bridge["ipam"]["ranges"] == [[{"subnet": node_config.POD_SUBNET}]]


def test_kubelet_config_tolerates_cgroup_v1_swap_and_a_full_disk() -> None:
    config = yaml.safe_load(
        node_config.kubelet_config(
            LAYOUT, PORTS, node_ip="192.0.2.2", ca_file=Path("/ca"), tls_cert=Path("/c"), tls_key=Path("/k")
        )
    )
    assert config["failCgroupV1"] is False and config["failSwapOn"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == "/ca"
    assert config["authorization"]["mode"] == "Webhook"
    assert config["containerRuntimeEndpoint"] == "unix:///s/containerd.sock"
    assert config["imageGCHighThresholdPercent"] == 100
    assert all(value.endswith(("%", "Mi")) for value in config["evictionHard"].values())
    assert config["podLogsDir"] == "/r/pod-logs"


def test_kube_proxy_leaves_sysctls_alone() -> None:
    config = yaml.safe_load(node_config.kube_proxy_config(PORTS, kubeconfig=Path("/kc"), node_name="n"))
    assert config["mode"] == "iptables"
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["conntrack"]["tcpEstablishedTimeout"] == "0s"
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["clusterCIDR"] == node_config.POD_SUBNET
