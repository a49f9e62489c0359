"""Readiness with the operator's repository config (issue 10, finding 2b): ready only once every model the
config names answers; a named model that cannot answer holds it back. Real MinIO, real runtime process."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.integration.s3.helpers import S3Helper
from tests.support.runtime_process import RuntimeProcess

pytestmark = [pytest.mark.s3]

MODELS = ("pre", "post")


def answers(client: grpcclient.InferenceServerClient, name: str) -> bool:
    item = grpcclient.InferInput("X", [1, 4], "FP32")
    item.set_data_from_numpy(np.zeros((1, 4), np.float32))
    try:
        return int(client.infer(name, [item]).as_numpy("version")[0, 0]) == 1
    except InferenceServerException:
        return False


def http_ready(proc: RuntimeProcess) -> bool:
    try:
        with urllib.request.urlopen(f"http://{proc.http_url}/v2/health/ready", timeout=10) as response:
            return int(response.status) == 200
    except urllib.error.HTTPError:
        return False


def grpc_serving(proc: RuntimeProcess) -> bool:
    with grpc.insecure_channel(proc.grpc_url) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
        return bool(status == health_pb2.HealthCheckResponse.SERVING)


def write_config(path: Path, s3: S3Helper, models: dict[str, str]) -> None:
    spec = {"models": [{"name": n, "source": src} for n, src in models.items()], "s3": {"endpoint_url": s3.endpoint_url}}
    path.write_text(json.dumps(spec))


def test_ready_only_when_every_configured_model_answers(s3: S3Helper, tmp_path: Path) -> None:
    for name in MODELS:
        s3.put_versioned(f"team/{name}", [1], marker=True)
    config = tmp_path / "repository.json"
    sources = {name: f"s3://models/team/{name}" for name in MODELS}
    write_config(config, s3, sources)
    args = [f"--repository-config={config}", "--model-control-mode=poll", "--repository-poll-secs=0.5",
            "--repository-settle-secs=2", f"--model-cache-dir={tmp_path / 'cache'}"]
    with RuntimeProcess([], args) as proc, proc.grpc_client() as client:
        # From the first moment the server listens: whenever it says ready (HTTP or gRPC health), every model
        # answers. Main said ready during the initial sync while the models answered 404.
        samples: list[tuple[bool, bool]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            said_ready = http_ready(proc)
            serving = grpc_serving(proc)
            all_answer = all(answers(client, name) for name in MODELS)
            if said_ready or serving:
                assert all_answer, f"ready (http {said_ready}, grpc {serving}) while a model does not answer"
            samples.append((said_ready and serving, all_answer))
            if said_ready and serving:
                break
        assert samples[-1] == (True, True), samples[-5:]
        assert any(not ready for ready, _ in samples), "never observed the start-up window"

        # A model the config names that cannot answer (nothing under its prefix) holds readiness back; the
        # others keep answering; removing it from the config makes the server ready again.
        write_config(config, s3, {**sources, "ghost": "s3://models/team/ghost"})
        deadline = time.monotonic() + 60
        while http_ready(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not http_ready(proc) and not grpc_serving(proc)
        assert not client.is_model_ready("ghost")
        assert all(answers(client, name) for name in MODELS)
        write_config(config, s3, sources)
        deadline = time.monotonic() + 60
        while not http_ready(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert http_ready(proc) and grpc_serving(proc) and all(answers(client, name) for name in MODELS)
