"""`python -m demo --kubeconfig ...` against the real-node stack: the demo's steps after the cluster is up, as
a user with a cluster of their own runs them (the chart is already installed there, so the demo uses that
operator), through kubectl and helm only: trained models published to S3 (its own bucket), Models and
Ensembles applied until Ready, the example client in a pod through the Services, a new classifier version
published under load from a pod (0 failed, 0 mixed), cleanup. `make demo` runs the same steps after starting
its own embedded cluster (demo.cluster.embedded), which cannot run beside this session's node."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from e2e.real_stack import RealStack
from e2e.scenario import record
from tests.infra.tools import REPO_ROOT

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(1200)]

BUCKET = "demo-models"


def test_demo_on_a_cluster_of_yours(real_stack: RealStack) -> None:
    stack = real_stack
    argv = [
        sys.executable, "-m", "demo", "--kubeconfig", str(stack.cp.kubeconfig_path),
        "--runtime-image", stack.runtime_image.reference, "--operator-image", stack.operator_image.reference,
        "--s3-endpoint", stack.minio.endpoint_url, "--s3-bucket", BUCKET,
    ]  # fmt: skip
    env = {"AWS_ACCESS_KEY_ID": stack.minio.access_key, "AWS_SECRET_ACCESS_KEY": stack.minio.secret_key}
    began = time.monotonic()
    result = subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=1100,
        env={**_base_env(), **env},
    )  # fmt: skip
    seconds = time.monotonic() - began
    output = result.stdout + result.stderr
    print(output[-6000:])
    assert result.returncode == 0, output[-6000:]
    summary = output[output.rindex("\nSummary") :]
    assert "all checks passed" in summary
    assert ", 0 failed, 0 mixed, 0 wrong" in summary
    assert "the cluster already runs the operator" in output
    # Nothing left behind: the namespace and the demo's objects in its bucket are gone.
    assert stack.cp.kubectl("get", "namespace", "ensemble-demo", check=False).returncode != 0
    listed = stack.s3.list_objects_v2(Bucket=BUCKET)
    assert listed.get("KeyCount", 0) == 0, [o["Key"] for o in listed.get("Contents", [])][:10]
    record("real_node.json", "demo (--kubeconfig)", {"seconds": round(seconds, 1)})


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "AWS_"))}
