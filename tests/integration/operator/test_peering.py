"""Two operator processes peer through the chart's ClusterKopfPeering: exactly one acts, and when it
stops the other takes over."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.controlplane import ControlPlane

from .support import (
    OperatorProcess,
    Release,
    apply,
    cpu_ensemble,
    namespace_with,
    phase_is,
    wait_ensemble,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def test_one_operator_acts_and_the_other_takes_over(
    audited_control_plane: ControlPlane, release: Release, operator: OperatorProcess, tmp_path: Path
) -> None:
    cp = audited_control_plane
    a = operator  # priority 100, serves the webhook
    since = len(a.log())
    b = OperatorProcess("operator-b", release, tmp_path, priority=200, webhook=False)
    b.start()
    try:
        wait_for(
            lambda: "Pausing operations in favour of" in a.log()[since:],
            "operator-a to pause in favour of operator-b",
            detail=lambda: a.process.log_tail(20),
        )
        ns = namespace_with(cp, "peering", cpu_ensemble("first", replicas=1))
        wait_ensemble(cp, ns, "first", phase_is("Ready"), "phase Ready (reconciled by operator-b)", timeout=90)
        assert b.reconciled(ns, "first")
        assert not a.reconciled(ns, "first")
    finally:
        b.stop()

    wait_for(
        lambda: "Resuming operations" in a.log()[since:],
        "operator-a to resume once operator-b is gone",
        timeout=30,
        detail=lambda: a.process.log_tail(20),
    )
    apply(cp, ns, cpu_ensemble("second", replicas=1))
    wait_ensemble(cp, ns, "second", phase_is("Ready"), "phase Ready (reconciled by operator-a)", timeout=90)
    assert a.reconciled(ns, "second")
    assert not b.reconciled(ns, "second")
