"""A memory limit enforced by the kernel on the real node: a model version whose load exceeds the runtime
container's memory limit is OOM-killed, the kubelet restarts the container, and the runtime's load journal
(on the pod's cache emptyDir, kept across the restart) keeps it from loading that version again: the
container is not killed again (no crash loop), and version 1 serves again.

Model `hog` (python backend, Y = X + version): version 1 is small; version 2 fills more memory in
`initialize` than the container may use.

Found by this test: the restarted runtime did not fall back to version 1 (the S3 sync had dropped it from the
cache); fixed in repository.remote.version_changes, tests/integration/s3/test_load_journal_s3.py.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_runtime.load_journal import DIED_LOADING

from e2e.real_stack import RealStack
from e2e.scenario import BUCKET, JSON, is_ready, kubectl_apply, live_pods, record, wait_ensemble
from tests.integration.operator.support import new_namespace, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(600)]

NAME = "hog-pipeline"
MODEL = "hog"
PREFIX = "hog"
GROUP = "serving.ensemble.dev/v1alpha1"
MEMORY_LIMIT = "768Mi"
HOG_BYTES = 2 * 1024**3  # more than the limit, touched page by page
GRPC_PORT = 8001


def model_source(version: int, hog_bytes: int = 0) -> str:
    return textwrap.dedent(
        f"""
        import numpy as np
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def initialize(self, args):
                self.held = np.ones({hog_bytes}, dtype=np.uint8) if {hog_bytes} else None

            def execute(self, requests):
                out = []
                for request in requests:
                    x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                    y = (x + {version}).astype(np.float32)
                    out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
                return out
        """
    )


def hog_model(stack: RealStack) -> JSON:
    tensor = {"dataType": "TYPE_FP32", "dims": [4]}
    return {
        "apiVersion": GROUP,
        "kind": "Model",
        "metadata": {"name": MODEL},
        "spec": {
            "source": f"s3://{BUCKET}/{PREFIX}",
            "backend": "python",
            "maxBatchSize": 8,
            "versionPolicy": {"latest": {"numVersions": 1}},
            "inputs": [{"name": "X", **tensor}],
            "outputs": [{"name": "Y", **tensor}],
            "instanceGroups": [{"kind": "KIND_CPU", "count": 1}],
            "s3": {
                "endpointUrl": stack.minio.endpoint_url,
                "region": stack.minio.region,
                "secretRef": {"name": "model-store-credentials"},
            },
        },
    }


def hog_ensemble() -> JSON:
    return {
        "apiVersion": GROUP,
        "kind": "Ensemble",
        "metadata": {"name": NAME},
        "spec": {
            "maxBatchSize": 8,
            "inputs": [{"name": "X", "dataType": "FP32", "dims": [4]}],
            "outputs": [{"name": "Y", "dataType": "FP32", "dims": [4]}],
            "steps": [{"name": "hog", "modelRef": {"name": MODEL}, "inputMap": {"X": "X"}, "outputMap": {"Y": "Y"}}],
            "replicas": 1,
            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": MEMORY_LIMIT}},
            "runtime": {"pollIntervalSeconds": 2, "exitTimeoutSeconds": 10},
        },
    }


def upload(stack: RealStack, version: int, hog_bytes: int = 0) -> None:
    stack.s3.put_object(
        Bucket=BUCKET, Key=f"{PREFIX}/{version}/model.py", Body=model_source(version, hog_bytes).encode()
    )
    stack.s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{version}/.complete", Body=b"")


def infer(address: str) -> list[float]:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with grpcclient.InferenceServerClient(address) as client:
        tensor = grpcclient.InferInput("X", [1, 4], "FP32")
        tensor.set_data_from_numpy(x)
        result = client.infer(NAME, [tensor])
        y = result.as_numpy("Y")
    assert y is not None
    return [float(v) for v in y.reshape(-1)]


def killed_pod(stack: RealStack, ns: str) -> str:
    (pod,) = live_pods(stack.cp, ns, NAME)
    name: str = pod["metadata"]["name"]
    return name


def runtime_status(stack: RealStack, ns: str) -> JSON:
    (pod,) = live_pods(stack.cp, ns, NAME)
    status: JSON = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "runtime")
    return status


def test_a_version_over_the_memory_limit_is_oom_killed_and_not_loaded_again(
    real_stack: RealStack, tmp_path: Path
) -> None:
    stack = real_stack
    ns = new_namespace(stack.cp, "e2e-oom")
    try:
        upload(stack, 1)
        secret = next(d for d in stack.documents("text") if d["kind"] == "Secret")
        kubectl_apply(stack.cp, ns, [secret, hog_model(stack), hog_ensemble()], tmp_path)
        wait_ensemble(stack, ns, NAME, is_ready, "Ready", timeout=300)
        service = f"{stack.service_ip(ns, NAME)}:{GRPC_PORT}"
        assert wait_for(lambda: infer(service), f"v1 answers through {service}", timeout=60) == [1.0, 2.0, 3.0, 4.0]
        assert runtime_status(stack, ns)["restartCount"] == 0

        began = time.monotonic()
        upload(stack, 2, HOG_BYTES)
        killed = wait_for(
            lambda: s if (s := runtime_status(stack, ns)).get("restartCount", 0) >= 1 else None,
            "the runtime container OOM-killed and restarted",
            timeout=240,
            detail=lambda: stack.diagnostics(ns, NAME),
        )
        oom_seconds = time.monotonic() - began
        terminated = killed["lastState"]["terminated"]
        assert terminated["reason"] == "OOMKilled", terminated
        assert terminated["exitCode"] == 137, terminated

        # The restarted runtime reads its journal (on the cache emptyDir, kept across the restart): version 2
        # is not loaded again, and the container is not killed again (no crash loop).
        wait_for(
            lambda: DIED_LOADING in stack.container_log(ns, killed_pod(stack, ns), tail=200),
            "the restarted runtime to report version 2 from its load journal",
            timeout=120,
            detail=lambda: stack.diagnostics(ns, NAME),
        )
        journal_seconds = time.monotonic() - began
        status = runtime_status(stack, ns)
        assert status["restartCount"] == 1, status  # one kill, one restart
        assert "running" in status["state"], status
        # And version 1 serves again (docs/s3.md, "Load journal": latest 1 over versions 1 and 2 picks 1): the
        # sync fetched it back from S3 for the fallback; the Ensemble is Ready and answers through its Service.
        wait_ensemble(stack, ns, NAME, is_ready, "Ready again on version 1", timeout=180)
        assert wait_for(lambda: infer(service), f"v1 answers through {service} again", timeout=60) == [
            1.0, 2.0, 3.0, 4.0,
        ]  # fmt: skip
        fallback_seconds = time.monotonic() - began
        assert runtime_status(stack, ns)["restartCount"] == 1
        print(f"\nOOM: killed {oom_seconds:.1f} s after the upload; journal honoured after {journal_seconds:.1f} s; "
              f"v1 serving again after {fallback_seconds:.1f} s")
        record(
            "real_node.json",
            "memory limit",
            {
                "oom_killed_after_upload_s": round(oom_seconds, 1),
                "journal_reported_s": round(journal_seconds, 1),
                "serving_v1_again_s": round(fallback_seconds, 1),
            },
        )
    finally:
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
