"""The built operator image: it runs as uid 1000 with its dependencies installed, and run as the chart runs it
against a real API server, its PID 1 (the operator, no init) ends on SIGTERM."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.conftest_plugin import CONTROL_PLANE_BINARIES
from tests.infra.controlplane import ControlPlane
from tests.infra.images import DockerDaemon
from tests.infra.process import http_status
from tests.infra.tools import ToolLocator, require
from tests.support.ports import free_port

from .support import POD_LIKE, command_line, host_pid, process_ids, terminate, wait_running

CHART = Path(__file__).resolve().parents[3] / "charts" / "ensemble-operator"
PEERING = "ensemble-operator"


def test_runs_as_uid_1000_with_its_entry_point(docker_daemon: DockerDaemon, operator_image: str) -> None:
    probe = (
        "import os, shutil, kopf, kubernetes, ensemble_operator.__main__; "
        "print(os.getuid(), os.getgid(), shutil.which('ensemble-operator'))"
    )
    result = docker_daemon.docker(
        "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL", operator_image, "python", "-c", probe
    )
    assert result.stdout.split() == ["1000", "1000", "/opt/ensemble/bin/ensemble-operator"], result.stderr


@pytest.fixture(scope="module")
def control_plane_with_crds(tool_locator: ToolLocator) -> Iterator[ControlPlane]:
    """A control plane with the chart's CRDs and the ClusterKopfPeering the chart creates."""
    require(*CONTROL_PLANE_BINARIES, locator=tool_locator)
    with ControlPlane(locator=tool_locator, crds=sorted((CHART / "crds").glob("*.yaml"))) as cp:
        cp.kubectl(
            "apply", "-f", "-",
            input=f"apiVersion: kopf.dev/v1\nkind: ClusterKopfPeering\nmetadata:\n  name: {PEERING}\n",
        )  # fmt: skip
        yield cp


def test_sigterm_to_pid_1_ends_the_operator(
    docker_daemon: DockerDaemon,
    operator_image: str,
    control_plane_with_crds: ControlPlane,
    tmp_path: Path,
) -> None:
    # The admin kubeconfig (certificates embedded), readable by uid 1000, mounted read-only.
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copyfile(control_plane_with_crds.kubeconfig_path, kubeconfig)
    kubeconfig.chmod(0o644)
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    options = (
        *POD_LIKE,
        "--volume", f"{kubeconfig}:/etc/ensemble/kubeconfig:ro",
        "--env", "KUBECONFIG=/etc/ensemble/kubeconfig",
        "--env", f"ENSEMBLE_OPERATOR_LIVENESS_ENDPOINT={liveness}",
        "--env", f"ENSEMBLE_OPERATOR_PEERING_NAME={PEERING}",
    )  # fmt: skip
    # No command: the image's own (the chart passes the same, `ensemble-operator`).
    container = docker_daemon.run_detached(operator_image, options=options)
    try:
        wait_running(
            docker_daemon,
            container,
            lambda: http_status(liveness) == 200 or None,
            timeout=180,
            what="the operator's liveness endpoint",
        )
        pid = host_pid(docker_daemon, container)
        assert command_line(pid)[1:2] == ["/opt/ensemble/bin/ensemble-operator"]
        assert process_ids(pid) == ([1000] * 4, [1000] * 4)
        # Well inside the 30 s grace period a pod gets by default; nothing here ever sends SIGKILL.
        ended = terminate(docker_daemon, container, timeout=30)
        print(f"operator container exited {ended.seconds_after_signal:.2f} s after SIGTERM")
        assert ended.code == 0 and not ended.oom_killed, docker_daemon.logs(container)
    finally:
        docker_daemon.docker("rm", "--force", container, check=False)
