"""Pods that run the example client and the load inside the cluster, from the runtime image (it carries the
`ensemble_examples` package and tritonclient): they reach the Ensembles through their Services, as any
in-cluster client would. The held-out digits travel in a ConfigMap (scikit-learn is not in the image)."""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from demo.cluster import Kube, manifest_yaml

DIGITS_CONFIGMAP = "demo-held-out-digits"
DIGITS_FILE = "held_out.npz"
DIGITS_MOUNT = "/data"


def apply(kube: Kube, ns: str, docs: Sequence[dict[str, Any]]) -> str:
    """`kubectl apply -f` of `docs` written to a file, as a user would; returns kubectl's output."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(manifest_yaml(docs))
    return kube.kubectl("apply", "-n", ns, "-f", handle.name, timeout=120).stdout


def digits_configmap(held_out_npz: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DIGITS_CONFIGMAP},
        "binaryData": {DIGITS_FILE: base64.b64encode(held_out_npz).decode()},
    }


def python_pod(name: str, image: str, pull_policy: str, argv: Sequence[str]) -> dict[str, Any]:
    """A pod that runs `python argv...` once in the runtime image, non-root, read-only root filesystem."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "ensemble-demo"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": pull_policy,
                    "command": ["python", *argv],
                    "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {"name": "digits", "mountPath": DIGITS_MOUNT, "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "digits", "configMap": {"name": DIGITS_CONFIGMAP}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }


def pod_phase(kube: Kube, ns: str, name: str) -> str:
    result = kube.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
    if result.returncode != 0:
        return "Missing"
    phase: str = json.loads(result.stdout).get("status", {}).get("phase", "Pending")
    return phase


def run_pod(kube: Kube, ns: str, pod: dict[str, Any], on_line: Callable[[str], None], timeout_s: float = 600.0) -> tuple[str, str]:
    """Create `pod`, follow its log (each line to `on_line`) until it ends; its final phase and whole log."""
    name = pod["metadata"]["name"]
    kube.kubectl("delete", "pod", name, "-n", ns, "--ignore-not-found", "--wait=true", timeout=120)
    apply(kube, ns, [pod])
    deadline = time.monotonic() + timeout_s
    while pod_phase(kube, ns, name) == "Pending":
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {ns}/{name} still Pending after {timeout_s:.0f} s")
        time.sleep(0.5)
    follower = kube.stream("logs", "-f", name, "-n", ns)
    assert follower.stdout is not None
    for line in follower.stdout:
        on_line(line.rstrip("\n"))
    follower.wait()
    while (phase := pod_phase(kube, ns, name)) not in {"Succeeded", "Failed", "Missing"}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {ns}/{name} still {phase} after {timeout_s:.0f} s")
        time.sleep(0.5)
    log = kube.kubectl("logs", name, "-n", ns, check=False).stdout
    return phase, log


def held_out_npz() -> bytes:
    from ensemble_examples import digits

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / DIGITS_FILE
        digits.save(digits.split().held_out, path)
        return path.read_bytes()
