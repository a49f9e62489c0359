"""Fixtures: a control plane with an audit log of the operator's writes, the chart installed with Helm
(webhook called by URL on 127.0.0.1), and the operator running as a local process with the chart's
ServiceAccount token, so its RBAC is the chart's.

The control plane here is this package's own (the session one has no audit log); it takes about as long
to start as the shared one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.infra.conftest_plugin import CONTROL_PLANE_BINARIES
from tests.infra.controlplane import ControlPlane
from tests.infra.tools import ToolLocator, require
from tests.support.ports import free_port

from .support import (
    AUDIT_POLICY,
    CHART,
    RELEASE,
    RELEASE_NAMESPACE,
    SERVICE_ACCOUNT,
    AuditLog,
    OperatorProcess,
    Release,
    helm_values_file,
    write_webhook_tls,
)

# Start-up figures, printed in the terminal summary (see pytest_terminal_summary below).
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="package")
def audited_control_plane(
    tool_locator: ToolLocator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    require(*CONTROL_PLANE_BINARIES, "helm", locator=tool_locator)
    audit_dir = tmp_path_factory.mktemp("audit")
    policy = audit_dir / "policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    keep = os.environ.get("ENSEMBLE_KEEP_WORKDIR", "") in {"1", "true", "yes"}
    started = time.monotonic()
    with ControlPlane(
        locator=tool_locator,
        keep_workdir=keep,
        # The chart's CRDs before the controller-manager, as on a real cluster (see tests/infra/controlplane.py).
        crds=sorted((CHART / "crds").glob("*.yaml")),
        extra_apiserver_args=[
            f"--audit-policy-file={policy}",
            f"--audit-log-path={audit_dir / 'audit.log'}",
            "--audit-log-mode=blocking",
            "--audit-log-format=json",
        ],
    ) as cp:
        TIMINGS["control plane start (s)"] = time.monotonic() - started
        yield cp


@pytest.fixture(scope="package")
def audit_log(audited_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> AuditLog:
    argv = audited_control_plane.processes["kube-apiserver"].argv
    (path,) = [a.split("=", 1)[1] for a in argv if a.startswith("--audit-log-path=")]
    return AuditLog(Path(path))


@pytest.fixture(scope="package")
def release(audited_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """`helm install` of the chart (cluster-wide mode), its webhook pointed at 127.0.0.1."""
    cp = audited_control_plane
    workdir = tmp_path_factory.mktemp("release")
    port = free_port()
    started = time.monotonic()
    values = helm_values_file(workdir, Release.values(port))
    cp.helm(
        "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
        "-f", str(values), "--wait", "--timeout", "120s",
        "--skip-crds",  # the control plane was started with the chart's CRDs (audited_control_plane)
    )  # fmt: skip
    TIMINGS["helm install --wait (s)"] = time.monotonic() - started
    cert, key = write_webhook_tls(cp, workdir / "tls")
    kubeconfig = cp.service_account_kubeconfig(RELEASE_NAMESPACE, SERVICE_ACCOUNT, path=workdir / "sa.kubeconfig")
    return Release(webhook_port=port, cert_path=cert, key_path=key, kubeconfig=kubeconfig)


@pytest.fixture(scope="package")
def operator(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The acting operator for the whole package (priority 100; the peering test adds a higher one)."""
    proc = OperatorProcess("operator-a", release, tmp_path_factory.mktemp("operator"), priority=100)
    started = time.monotonic()
    try:
        proc.start()
        TIMINGS["operator start to /healthz (s)"] = time.monotonic() - started
        yield proc
    finally:
        proc.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("operator control-plane timings")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f}")
