"""A real node: the kubelet runs pods in containers (containerd + runc), enforces their securityContext,
restarts exited containers; kube-proxy balances a Service; GPU-requesting pods schedule on the
advertised `nvidia.com/gpu` capacity."""

from __future__ import annotations

import pytest

from tests.infra.controlplane import ControlPlane
from tests.infra.node import GPU_RESOURCE, RealNode

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
