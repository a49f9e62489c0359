"""The five example scenarios end to end: `kubectl apply` of examples/manifests/<folder>/ (pointed at the
test MinIO), the operator's Deployment running on the kubelet stand-in, the Ensemble Ready, inference with
tritonclient through every ready endpoint of the headless Service, then deletion leaving nothing behind.

The GPU scenarios ask 1 nvidia.com/gpu per replica at 2 replicas and the node has 2: each test deletes its
Ensemble (and waits for its pods to go) before the next starts. KIND_GPU instance groups fall back to CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import checks
from ensemble_examples.manifests import SCENARIOS

from e2e.scenario import Stack, delete_and_wait_gone, is_ready, kubectl_apply, ready_endpoints, record, wait_ensemble
from tests.integration.operator.support import new_namespace, wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(420)]

SENTENCES = ["a short sentence", "another, rather longer, sentence about models"]

CHECKS: dict[str, Callable[[Any, str], object]] = {
    "image": lambda client, model: checks.check_image_pipeline(client, model=model),
    "segmentation": lambda client, model: checks.check_seg_pipeline(client, model=model),
    "ocr": lambda client, model: checks.check_ocr_pipeline(client, model=model),
    "text": lambda client, model: checks.check_text_pipeline(client, SENTENCES, model=model),
    "dual": lambda client, model: checks.check_dual_classifier(client, model=model),
}
READY_TIMEOUT = 240.0


@pytest.mark.parametrize("folder", list(SCENARIOS))
def test_scenario(stack: Stack, folder: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[folder]
    name = scenario.ensemble
    ns = new_namespace(stack.cp, f"e2e-{folder}")
    try:
        started = time.monotonic()
        kubectl_apply(stack.cp, ns, stack.documents(folder), tmp_path)
        obj = wait_ensemble(stack, ns, name, is_ready, "Ready with every replica", timeout=READY_TIMEOUT)
        seconds = time.monotonic() - started
        print(f"\n{folder}: apply -> Ready in {seconds:.1f} s")
        record("ready_seconds.json", folder, round(seconds, 2))

        desired = obj["spec"]["replicas"]
        endpoints = wait_ensemble_endpoints(stack, ns, name, desired)
        for ip in endpoints:
            with grpcclient.InferenceServerClient(f"{ip}:8001") as client:
                CHECKS[folder](client, name)
        obj = wait_ensemble(stack, ns, name, lambda o: bool(o["status"].get("servedVersions")), "servedVersions")
        assert set(obj["status"]["servedVersions"]) == {s["modelRef"]["name"] for s in obj["spec"]["steps"]}

        delete_and_wait_gone(stack, ns, name)
    finally:
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def wait_ensemble_endpoints(stack: Stack, ns: str, name: str, count: int) -> list[str]:
    return wait_for(
        lambda: eps if len(eps := ready_endpoints(stack.cp, ns, name)) == count else None,
        f"{count} ready endpoints of {ns}/{name}-pods",
        timeout=30,
        detail=lambda: stack.diagnostics(ns, name),
    )
