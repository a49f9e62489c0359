"""pytest fixtures for the real control plane and MinIO.

Load with ``pytest_plugins = ["tests.infra.conftest_plugin"]`` in the root conftest (or
``-p tests.infra.conftest_plugin``), or import the fixtures into a conftest. Missing binaries skip the
tests that need them, with the command that builds them (``ENSEMBLE_BUILD_TOOLS=1`` builds on demand).
Set ``ENSEMBLE_KEEP_WORKDIR=1`` to keep the control plane's directory (logs, kubeconfigs) for debugging.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.infra.controlplane import ControlPlane
from tests.infra.minio import MinioServer
from tests.infra.tools import ToolLocator, require

CONTROL_PLANE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
)


@pytest.fixture(scope="session")
def tool_locator() -> ToolLocator:
    return ToolLocator.from_env()


@pytest.fixture(scope="session")
def control_plane(tool_locator: ToolLocator) -> Iterator[ControlPlane]:
    """One control plane for the whole session, with the default fake nodes (one GPU, one CPU)."""
    require(*CONTROL_PLANE_BINARIES, locator=tool_locator)
    keep = os.environ.get("ENSEMBLE_KEEP_WORKDIR", "") in {"1", "true", "yes"}
    with ControlPlane(locator=tool_locator, keep_workdir=keep) as cp:
        yield cp


@pytest.fixture
def minio_server(tool_locator: ToolLocator) -> Iterator[MinioServer]:
    """A fresh MinIO server (empty data directory) per test."""
    require("minio", locator=tool_locator)
    with MinioServer(locator=tool_locator) as server:
        yield server
