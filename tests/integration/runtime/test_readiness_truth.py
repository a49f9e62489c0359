"""Readiness that tells the truth (issue 10, finding 2): server ready, gRPC health, model ready and the index
agree with what inference does, after bogus loads and after a served version's files change in place."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import onnx_models
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.runtime_process import RuntimeProcess

CONFIG = 'platform: "onnxruntime_onnx" max_batch_size: 8\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "m").mkdir(parents=True)
    (root / "m" / "config.pbtxt").write_text(CONFIG)
    onnx_models.save(onnx_models.versioned(1), root / "m" / "1" / "model.onnx")
    return root


def version_of_m(client: grpcclient.InferenceServerClient) -> int:
    item = grpcclient.InferInput("X", [1, 4], "FP32")
    item.set_data_from_numpy(np.zeros((1, 4), np.float32))
    return int(client.infer("m", [item]).as_numpy("version")[0, 0])


def http_ready(proc: RuntimeProcess) -> int:
    try:
        with urllib.request.urlopen(f"http://{proc.http_url}/v2/health/ready", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def grpc_health(proc: RuntimeProcess) -> int:
    with grpc.insecure_channel(proc.grpc_url) as channel:
        status: int = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
        return status


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def index_bytes(client: grpcclient.InferenceServerClient) -> int:
    return len(json.dumps(client.get_model_repository_index(as_json=True)))


def wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout}s")


def test_loads_of_unknown_names_leave_readiness_and_memory_alone(repo: Path) -> None:
    with RuntimeProcess([repo], ["--model-control-mode=explicit", "--load-model=m"]) as proc:
        proc.wait_ready()
        channel_options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        with grpcclient.InferenceServerClient(proc.grpc_url, channel_args=channel_options) as client, \
                proc.http_client() as http:
            assert version_of_m(client) == 1
            index_before = index_bytes(client)
            rss_before = rss_bytes(proc.pid)
            with pytest.raises(InferenceServerException, match="not in any model repository"):
                client.load_model("does_not_exist")
            with pytest.raises(InferenceServerException, match="not in any model repository"):
                http.load_model("does_not_exist_either")
            rss = [rss_before]
            for batch in range(2):  # the figure: 20 loads of 2 MiB names (main: +160 MB each time)
                for attempt in range(20):
                    name = f"{batch}{attempt:02d}" + "x" * (2 << 20)
                    with pytest.raises(InferenceServerException) as info:
                        client.load_model(name)
                    assert len(info.value.message()) < 1000, len(info.value.message())  # the name is clipped
                rss.append(rss_bytes(proc.pid))
            index_after = index_bytes(client)
            print(f"RSS before / after 20 / after 40 loads of 2 MiB unknown names: {[r >> 20 for r in rss]} MiB; "
                  f"index {index_before}/{index_after} bytes")
            assert index_after == index_before
            # The first batch grows the gRPC and allocator pools once; later ones must not keep growing with
            # records (main: +110 MB a batch). What is left is refused requests held in reference cycles of the
            # gRPC error path until the next full garbage collection.
            assert rss[2] - rss[1] < 64 << 20, rss
            with pytest.raises(InferenceServerException, match="not loaded"):
                client.unload_model("does_not_exist")
            # readiness is what it was: every model asked for (m) answers
            assert client.is_server_ready()
            assert http.is_server_ready()
            assert http_ready(proc) == 200
            assert grpc_health(proc) == health_pb2.HealthCheckResponse.SERVING
            assert not client.is_model_ready("does_not_exist")
            assert version_of_m(client) == 1


def test_a_reload_that_fails_in_place_keeps_the_old_copy_serving(repo: Path) -> None:
    """Version 1's file is replaced in place (same number) by a broken one, in poll mode: the loaded copy keeps
    answering and everything that reports readiness says so, the index says why; a good file then rolls over."""
    with RuntimeProcess([repo], ["--model-control-mode=poll", "--repository-poll-secs=0.3"]) as proc:
        proc.wait_ready()
        model_file = repo / "m" / "1" / "model.onnx"
        with proc.grpc_client() as client, proc.http_client() as http:
            assert version_of_m(client) == 1
            model_file.write_bytes(b"\x08\x07not-an-onnx-model")

            def failures() -> int:
                return proc.log_text().count("failed to load model 'm' version 1")

            wait_for(lambda: failures() > 0, "the poll tried the broken copy")
            for attempt in range(3):  # and again after each of the next two polls retried it
                if attempt:
                    seen = failures()
                    wait_for(lambda: failures() > seen, "the next poll retried the broken copy")  # noqa: B023
                assert version_of_m(client) == 1
                assert client.is_model_ready("m") and client.is_model_ready("m", "1")
                assert http.is_model_ready("m")
                assert client.is_server_ready() and http_ready(proc) == 200
                assert grpc_health(proc) == health_pb2.HealthCheckResponse.SERVING
                entry = next(e for e in client.get_model_repository_index(as_json=True)["models"] if e["name"] == "m")
                assert entry["state"] == "READY" and entry["version"] == "1", entry
                assert "keeps serving" in entry["reason"] and "model.onnx" in entry["reason"], entry

            # a fixed copy of the same version number replaces the loaded one once it has loaded
            onnx_models.save(onnx_models.versioned(7), model_file.with_suffix(".tmp"))
            os.replace(model_file.with_suffix(".tmp"), model_file)
            wait_for(lambda: version_of_m(client) == 7, "the fixed copy serves")
            entry = next(e for e in client.get_model_repository_index(as_json=True)["models"] if e["name"] == "m")
            assert entry["state"] == "READY" and entry.get("reason", "") == "", entry
            assert client.is_server_ready()
