from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import pytest

from e2e.real_stack import NODE_GPUS, RealStack, chart_values, node_archive
from e2e.real_stack import install_chart as install_chart_in_cluster
from e2e.scenario import record, upload_example_repository
from tests.infra.conftest_plugin import CONTROL_PLANE_BINARIES, control_plane, tool_locator
from tests.infra.controlplane import ControlPlane
from tests.infra.images import require_image
from tests.infra.minio import MinioServer
from tests.infra.node import RealNode
from tests.infra.node_config import CNI_BIN_DIR
from tests.infra.node_host import primary_ipv4
from tests.infra.tools import ToolLocator, require

__all__ = ["control_plane", "real_stack", "tool_locator"]


NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")


def real_node_unavailable_reason() -> str | None:
    """Why this machine cannot run a real node, or None."""
    if os.geteuid() != 0:
        return "a real node needs root"
    if shutil.which("runc") is None:
        return "runc is not installed (apt-get install runc)"
    if not (CNI_BIN_DIR / "bridge").exists():
        return f"no CNI plugins in {CNI_BIN_DIR} (apt-get install containernetworking-plugins)"
    if shutil.which("iptables") is None:
        return "iptables is not installed"
    return None


@pytest.fixture(scope="session")
def real_stack(tool_locator: ToolLocator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    """The whole system on a real node, started once per session: an own control plane advertising the
    host's routable address, a RealNode with the runtime and operator images (`make images`) imported, MinIO
    on that address with the example repository in bucket `models`, and the chart installed with Helm (the
    operator in the cluster). Its start-up figures go to e2e/results/real_node.json."""
    reason = real_node_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    require(*CONTROL_PLANE_BINARIES, *NODE_BINARIES, "helm", "minio", locator=tool_locator)
    runtime_image = require_image("runtime-cpu")
    operator_image = require_image("operator")
    workdir = tmp_path_factory.mktemp("e2e-real-stack")
    keep = os.environ.get("ENSEMBLE_KEEP_WORKDIR", "") in {"1", "true", "yes"}
    address = primary_ipv4()
    began = time.monotonic()
    with (
        ControlPlane(nodes=(), routable_address=address, locator=tool_locator, keep_workdir=keep) as cp,
        MinioServer(locator=tool_locator, host=address) as minio,
        RealNode(
            cp,
            images=[node_archive(runtime_image), node_archive(operator_image)],
            gpus=NODE_GPUS,
            locator=tool_locator,
            keep_workdir=keep,
        ) as node,
    ):
        upload_example_repository(minio.boto3_client(), workdir)
        chart_began = time.monotonic()
        install_chart_in_cluster(cp, workdir / "release", chart_values(runtime_image, operator_image))
        stack = RealStack(cp, node, minio, runtime_image, operator_image)
        info = stack.node_info()
        record(
            "real_node.json",
            "stack",
            {
                "containerRuntimeVersion": info["containerRuntimeVersion"],
                "kubeletVersion": info["kubeletVersion"],
                "runtime_image": runtime_image.reference,
                "operator_image": operator_image.reference,
                "node_start_s": round(node.timings["start"], 1),
                "image_import_s": round(node.timings["images"], 1),
                "helm_install_wait_s": round(time.monotonic() - chart_began, 1),
                "stack_start_s": round(time.monotonic() - began, 1),
            },
        )
        yield stack
