"""Fixtures: a control plane whose API server pods can reach, a real node (containerd, kubelet,
kube-proxy) registered with it, and the tests' echo image imported into it.

The node is module-scoped: one machine holds one real node at a time (a host-wide lock), so each module
gets its own and stops it before the next starts. Skipped, with the reason, where the machine cannot run
one: not root, no runc or CNI plugins, tools not built (`make tools` builds them).
The figures (node Ready after kubelet start, fixture start and stop, Deployment Ready) are printed in the
terminal summary; they are measurements, never assertions.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.conftest_plugin import CONTROL_PLANE_BINARIES
from tests.infra.controlplane import ControlPlane
from tests.infra.node import RealNode
from tests.infra.node_config import CNI_BIN_DIR
from tests.infra.node_host import primary_ipv4
from tests.infra.node_images import ImageArchive, static_image
from tests.infra.tools import ToolLocator, require

ECHO_SOURCE = Path(__file__).parent / "images" / "echo"
ECHO_IMAGE = "ensemble.test/echo:1"
ECHO_UID = 1000
NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")
TIMINGS = pytest.StashKey[dict[str, list[float]]]()


def record_timing(config: pytest.Config, name: str, seconds: float) -> None:
    config.stash.setdefault(TIMINGS, {}).setdefault(name, []).append(seconds)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    timings = config.stash.get(TIMINGS, {})
    if timings:
        terminalreporter.section("real node timings (s)")
        for name, values in timings.items():
            terminalreporter.write_line(f"{name}: {', '.join(f'{v:.1f}' for v in values)}")


def machine_can_run_a_node() -> str | None:
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


@pytest.fixture(scope="module")
def echo_image(tool_locator: ToolLocator) -> ImageArchive:
    if shutil.which("go") is None:
        pytest.skip("building the echo image needs Go")
    return static_image(ECHO_SOURCE, "echo", ECHO_IMAGE, uid=ECHO_UID, locator=tool_locator)


@pytest.fixture(scope="module")
def node_cluster(
    request: pytest.FixtureRequest, tool_locator: ToolLocator, echo_image: ImageArchive
) -> Iterator[tuple[ControlPlane, RealNode]]:
    reason = machine_can_run_a_node()
    if reason is not None:
        pytest.skip(reason)
    require(*CONTROL_PLANE_BINARIES, *NODE_BINARIES, locator=tool_locator)
    keep = os.environ.get("ENSEMBLE_KEEP_WORKDIR", "") in {"1", "true", "yes"}
    with ControlPlane(nodes=(), routable_address=primary_ipv4(), locator=tool_locator, keep_workdir=keep) as cp:
        node = RealNode(cp, images=[echo_image], locator=tool_locator, keep_workdir=keep)
        with node:
            record_timing(request.config, "node fixture start", node.timings["start"])
            record_timing(request.config, "node Ready after kubelet start", node.timings["node_ready"])
            record_timing(request.config, "image import", node.timings["images"])
            yield cp, node
        record_timing(request.config, "node fixture stop", node.timings["stop"])
