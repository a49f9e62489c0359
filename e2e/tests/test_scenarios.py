"""The five example scenarios end to end on a real node: `kubectl apply` of examples/manifests/<folder>/
(pointed at the test MinIO, CPU requests fitted to the node), the operator (the chart's Deployment, in the
cluster) rendering the runtime Deployment, the runtime image's containers started by the kubelet, the
Ensemble Ready, inference with tritonclient through the Ensemble's Service (ClusterIP, kube-proxy) and
through every ready endpoint of the headless Service, then deletion leaving nothing behind.

The GPU scenarios ask 1 nvidia.com/gpu per replica at 2 replicas and the node advertises 4: each test
deletes its Ensemble (and waits for its pods to go) before the next starts. KIND_GPU instance groups fall
back to CPU. Figures (apply -> Ready, deletion) go to e2e/results/real_node.json.
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

from e2e.real_stack import RealStack
from e2e.scenario import (
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

SENTENCES = ["a short sentence", "another, rather longer, sentence about models"]

CHECKS: dict[str, Callable[[Any, str], object]] = {
    "image": lambda client, model: checks.check_image_pipeline(client, model=model),
    "segmentation": lambda client, model: checks.check_seg_pipeline(client, model=model),
    "ocr": lambda client, model: checks.check_ocr_pipeline(client, model=model),
    "text": lambda client, model: checks.check_text_pipeline(client, SENTENCES, model=model),
    "dual": lambda client, model: checks.check_dual_classifier(client, model=model),
}
READY_TIMEOUT = 300.0
GRPC_PORT = 8001


@pytest.mark.parametrize("folder", list(SCENARIOS))
def test_scenario(real_stack: RealStack, folder: str, tmp_path: Path) -> None:
    stack = real_stack
    scenario = SCENARIOS[folder]
    name = scenario.ensemble
    ns = new_namespace(stack.cp, f"e2e-{folder}")
    try:
        started = time.monotonic()
        kubectl_apply(stack.cp, ns, stack.documents(folder), tmp_path)
        obj = wait_ensemble(stack, ns, name, is_ready, "Ready with every replica", timeout=READY_TIMEOUT)
        ready_seconds = time.monotonic() - started
        print(f"\n{folder}: apply -> Ready in {ready_seconds:.1f} s on the real node")

        desired = obj["spec"]["replicas"]
        endpoints = wait_ensemble_endpoints(stack, ns, name, desired)
        # Through the Service, as an in-cluster client would (kube-proxy's rules), then each pod directly.
        service = f"{stack.service_ip(ns, name)}:{GRPC_PORT}"
        with grpcclient.InferenceServerClient(service) as client:
            wait_for(lambda: client.is_model_ready(name) or None, f"{name} ready through {service}", timeout=60)
            CHECKS[folder](client, name)
        for ip in endpoints:
            with grpcclient.InferenceServerClient(f"{ip}:{GRPC_PORT}") as client:
                CHECKS[folder](client, name)
        obj = wait_ensemble(stack, ns, name, lambda o: bool(o["status"].get("servedVersions")), "servedVersions")
        assert set(obj["status"]["servedVersions"]) == {s["modelRef"]["name"] for s in obj["spec"]["steps"]}
        pods = live_pods(stack.cp, ns, name)
        assert {p["spec"]["nodeName"] for p in pods} == {stack.node.name}
        images = {c["image"] for p in pods for c in p["spec"]["containers"] if c["name"] == "runtime"}
        assert images == {stack.runtime_image.reference}

        delete_seconds = delete_and_wait_gone(stack, ns, name)
        record(
            "real_node.json",
            folder,
            {
                "apply_to_ready_s": round(ready_seconds, 2),
                "delete_s": round(delete_seconds, 2),
                "replicas": desired,
                "containerRuntimeVersion": stack.node_info()["containerRuntimeVersion"],
            },
        )
    finally:
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def wait_ensemble_endpoints(stack: RealStack, ns: str, name: str, count: int) -> list[str]:
    return wait_for(
        lambda: eps if len(eps := ready_endpoints(stack.cp, ns, name)) == count else None,
        f"{count} ready endpoints of {ns}/{name}-pods",
        timeout=60,
        detail=lambda: stack.diagnostics(ns, name),
    )
