"""`kubectl drain` of the real node honours an Ensemble's PodDisruptionBudget (maxUnavailable 1): one replica
is evicted, the eviction of the other is refused while the first has no ready replacement (the node is
cordoned, so none can start), and the survivor keeps serving through the Ensemble's Service. After
`kubectl uncordon` the Ensemble is Ready again with every replica.

The drain is limited to the Ensemble's pods (`--pod-selector`), so the operator's pod stays where it is.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import checks
from ensemble_examples.manifests import SCENARIOS

from e2e.real_stack import RealStack
from e2e.scenario import (
    ENSEMBLE_LABEL,
    delete_and_wait_gone,
    is_ready,
    kubectl_apply,
    live_pods,
    ready_endpoints,
    record,
    wait_ensemble,
)
from tests.integration.operator.support import new_namespace, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(600)]

FOLDER = "text"  # no GPU: its replacement pod would wait on the cordon alone
DRAIN_TIMEOUT_S = 45
GRPC_PORT = 8001


def test_drain_honours_the_pod_disruption_budget(real_stack: RealStack, tmp_path: Path) -> None:
    stack = real_stack
    name = SCENARIOS[FOLDER].ensemble
    ns = new_namespace(stack.cp, "e2e-drain")
    node = stack.node.name
    try:
        kubectl_apply(stack.cp, ns, stack.documents(FOLDER), tmp_path)
        wait_ensemble(stack, ns, name, is_ready, "Ready with every replica", timeout=300)
        wait_for(lambda: len(ready_endpoints(stack.cp, ns, name)) == 2, "2 ready endpoints", timeout=60)
        before = {p["metadata"]["uid"]: p["metadata"]["name"] for p in live_pods(stack.cp, ns, name)}
        assert len(before) == 2

        began = time.monotonic()
        drain = stack.cp.kubectl(
            "drain", node, f"--pod-selector={ENSEMBLE_LABEL}={name}", "--delete-emptydir-data",
            "--ignore-daemonsets", f"--timeout={DRAIN_TIMEOUT_S}s",
            check=False, timeout=DRAIN_TIMEOUT_S + 60,
        )  # fmt: skip
        drain_seconds = time.monotonic() - began
        output = drain.stdout + drain.stderr
        assert drain.returncode != 0, output
        assert "disruption budget" in output, output

        survivors = [p for p in live_pods(stack.cp, ns, name) if p["metadata"]["uid"] in before]
        assert len(survivors) == 1, (
            f"expected one original replica left, got {[p['metadata']['name'] for p in survivors]}"
        )
        replacements = [p for p in live_pods(stack.cp, ns, name) if p["metadata"]["uid"] not in before]
        assert all(p.get("status", {}).get("phase") == "Pending" for p in replacements), replacements
        assert ready_endpoints(stack.cp, ns, name) == [survivors[0]["status"]["podIP"]]
        service = f"{stack.service_ip(ns, name)}:{GRPC_PORT}"
        with grpcclient.InferenceServerClient(service) as client:
            checks.check_text_pipeline(client, ["served while the node drains"], model=name)
    finally:
        stack.cp.kubectl("uncordon", node, check=False)
    try:
        began = time.monotonic()
        wait_ensemble(stack, ns, name, is_ready, "Ready again after uncordon", timeout=300)
        wait_for(lambda: len(ready_endpoints(stack.cp, ns, name)) == 2, "2 ready endpoints again", timeout=60)
        recovery_seconds = time.monotonic() - began
        print(f"\ndrain: refused by the PDB after {drain_seconds:.1f} s; Ready {recovery_seconds:.1f} s after uncordon")
        record(
            "real_node.json",
            "drain",
            {"drain_refused_after_s": round(drain_seconds, 1), "uncordon_to_ready_s": round(recovery_seconds, 1)},
        )
        delete_and_wait_gone(stack, ns, name)
    finally:
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
