"""The real node leaves the host as it found it, after a clean stop and after a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra import node_host
from tests.infra.conftest_plugin import CONTROL_PLANE_BINARIES
from tests.infra.controlplane import ControlPlane
from tests.infra.node import RealNode
from tests.infra.node_config import BRIDGE, NodeLayout
from tests.infra.node_images import ImageArchive
from tests.infra.tools import ToolLocator, require

from .conftest import NODE_BINARIES, machine_can_run_a_node, record_timing
from .support import create, pod, wait_pod_ready

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.timeout(600)]
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def can_run(tool_locator: ToolLocator) -> None:
    reason = machine_can_run_a_node()
    if reason is not None:
        pytest.skip(reason)
    require(*CONTROL_PLANE_BINARIES, *NODE_BINARIES, locator=tool_locator)


def cni_results() -> set[str]:
    directory = node_host.CNI_RESULTS
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def leftovers(layout: NodeLayout, cni_results_before: set[str]) -> list[str]:
    found = [f"CNI result: {name}" for name in sorted(cni_results() - cni_results_before)]
    for binary in ("iptables", "ip6tables"):
        chains = node_host.node_chains(binary)
        if chains:
            found.append(f"{binary}: {chains}")
    pids = node_host.node_processes(layout)
    if pids:
        found.append(f"processes: {pids}")
    mounts = node_host.mounts_under(layout.root, layout.state)
    if mounts:
        found.append(f"mounts: {mounts}")
    found += [f"path: {p}" for p in (layout.root, layout.state, node_host.DEVICE_PLUGINS_DIR) if p.exists()]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    return found


@pytest.mark.usefixtures("can_run")
def test_stop_leaves_no_chains_processes_mounts_or_paths(
    request: pytest.FixtureRequest, tool_locator: ToolLocator, echo_image: ImageArchive
) -> None:
    layout = NodeLayout()
    before = cni_results()
    with ControlPlane(nodes=(), routable_address=node_host.primary_ipv4(), locator=tool_locator) as cp:
        node = RealNode(cp, images=[echo_image], locator=tool_locator)
        with node:
            create(cp, pod("running-at-stop", echo_image.tag, security={"runAsUser": 1000}))
            wait_pod_ready(cp, "running-at-stop")
            assert node_host.node_chains("iptables"), "kube-proxy and the kubelet made no KUBE-* chains"
            assert node.running_tasks()
        record_timing(request.config, "node stop with a running pod", node.timings["stop"])
    assert leftovers(layout, before) == []


@pytest.mark.usefixtures("can_run")
def test_a_crashed_run_is_swept_by_the_next(tool_locator: ToolLocator, echo_image: ImageArchive) -> None:
    layout = NodeLayout()
    before = cni_results()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "tests.integration.node.crashing_node", str(echo_image.path), echo_image.tag]
    output: list[str] = []
    with subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as crashing:
        try:
            assert crashing.stdout is not None
            for line in crashing.stdout:
                output.append(line)
                if line.strip() == "READY":
                    break
        finally:
            crashing.send_signal(signal.SIGKILL)  # its daemons die with it (PR_SET_PDEATHSIG); shims, pods do not
    if not output or output[-1].strip() != "READY":
        pytest.fail("the crashing node never became ready:\n" + "".join(output[-40:]))
    assert node_host.node_processes(layout), "nothing of the crashed node survived to sweep"

    address = node_host.primary_ipv4()
    with ControlPlane(nodes=(), routable_address=address, locator=tool_locator) as cp, RealNode(cp) as node:
        assert any(item.startswith("processes") for item in node.stale_found)
        assert any("chains" in item for item in node.stale_found)
        assert node.ready()
    assert leftovers(layout, before) == []
