from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.kubelet import KubeletStandIn
from tests.infra.conftest_plugin import control_plane, tool_locator
from tests.infra.controlplane import ApiError, ControlPlane
from tests.infra.process import poll_until

__all__ = ["control_plane", "kubelet", "namespace", "tool_locator"]


@pytest.fixture(scope="module")
def kubelet(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeletStandIn]:
    """The stand-in serving node e2e-gpu-0 of the session's control plane (the Node is deleted after)."""
    if os.geteuid() != 0:
        pytest.skip("the kubelet stand-in needs root: mount namespaces, bind mounts, a local route for pod IPs")
    workdir: Path = tmp_path_factory.mktemp("kubelet")
    with KubeletStandIn(control_plane.kubeconfig_path, workdir=workdir) as standin:
        poll_until(
            lambda: control_plane.node_ready(standin.node_name),
            timeout=30,
            what=f"node {standin.node_name} to become Ready",
        )
        yield standin


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount, which pods need); deleted afterwards."""
    name = f"kubelet-{uuid.uuid4().hex[:8]}"
    control_plane.api(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    poll_until(
        lambda: control_plane.api_client.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
        what=f"the default ServiceAccount of {name}",
    )
    yield name
    try:
        control_plane.api("DELETE", f"/api/v1/namespaces/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise
