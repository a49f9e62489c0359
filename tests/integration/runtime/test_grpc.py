"""Every RPC of the Triton gRPC service against a real runtime process, called with real tritonclient."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.runtime.repo import BROKEN
from tests.support.runtime_process import RuntimeProcess


def add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"), grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def test_health_and_metadata(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        assert client.is_server_live()
        assert client.is_server_ready()  # --strict-readiness=false: broken models do not hold it back
        meta = client.get_server_metadata(as_json=True)
        assert meta["name"] == "ensemble-runtime"
        assert "model_repository" in meta["extensions"]
        assert client.is_model_ready("add_sub")
        assert client.is_model_ready("add_sub", "1")
        assert not client.is_model_ready("add_sub", "2")
        model = client.get_model_metadata("add_sub", as_json=True)
        assert model["platform"] == "onnxruntime_onnx"
        assert model["versions"] == ["1"]
        assert [(i["name"], i["datatype"], i["shape"]) for i in model["inputs"]] == [
            ("INPUT0", "FP32", ["-1", "16"]),
            ("INPUT1", "FP32", ["-1", "16"]),
        ]
        config = client.get_model_config("add_sub", as_json=True)["config"]
        assert config["max_batch_size"] == 8
        assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 20000


def test_infer_raw_with_id_parameters_and_subset(server: RuntimeProcess) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    with server.grpc_client() as client:
        result = client.infer(
            "add_sub", add_sub_inputs(a, b), request_id="req-42",
            outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.as_numpy("OUTPUT0") is None  # only the requested output comes back
        response = result.get_response()
        assert response.id == "req-42"
        assert response.model_version == "1"
        full = client.infer("add_sub", add_sub_inputs(a, b))
        np.testing.assert_array_equal(full.as_numpy("OUTPUT0"), a + b)


def test_autocompleted_onnx_without_config(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        config = client.get_model_config("add_sub_noconfig", as_json=True)["config"]
        assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
        assert config["max_batch_size"] == 4
        a = np.ones((1, 16), np.float32)
        result = client.infer("add_sub_noconfig", add_sub_inputs(a, a))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def test_native_types_fp16_int8_bool_bytes(server: RuntimeProcess) -> None:
    values: dict[str, tuple[npt.NDArray[Any], str]] = {
        "fp16": (np.array([[1.5, -2.25]], np.float16), "FP16"),
        "int8": (np.array([[-128, 127]], np.int8), "INT8"),
        "flag": (np.array([[True, False]]), "BOOL"),
        "text": (np.array([[b"hello", "wörld".encode()]], dtype=np.object_), "BYTES"),
    }
    inputs = []
    for name, (array, dtype) in values.items():
        item = grpcclient.InferInput(f"{name}_in", list(array.shape), dtype)
        item.set_data_from_numpy(array)
        inputs.append(item)
    with server.grpc_client() as client:
        result = client.infer("types", inputs)
        for name, (array, _) in values.items():
            out = result.as_numpy(f"{name}_out")
            assert out.dtype == array.dtype
            assert out.tolist() == array.tolist()


def test_triton_python_model_runs_unchanged(server: RuntimeProcess) -> None:
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([4, 3, 2, 1], np.float32)
    with server.grpc_client() as client:
        result = client.infer("py_add_sub", add_sub_inputs(a, b))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.as_numpy("INFO")[0] == b"py_add_sub:1:CPU"


def test_python_errors_fail_only_that_request(server: RuntimeProcess) -> None:
    def call(value: float) -> np.ndarray:
        item = grpcclient.InferInput("X", [1], "FP32")
        item.set_data_from_numpy(np.array([value], np.float32))
        with server.grpc_client() as client:
            return np.asarray(client.infer("py_fail", [item]).as_numpy("Y"))

    np.testing.assert_allclose(call(4.0), [2.0])
    with pytest.raises(InferenceServerException, match="ValueError: negative input is not allowed"):
        call(-1.0)
    with pytest.raises(InferenceServerException, match="zero is refused"):
        call(0.0)
    np.testing.assert_allclose(call(9.0), [3.0])


def test_version_policy_and_version_routing(server: RuntimeProcess) -> None:
    x = np.zeros((1, 4), np.float32)
    with server.grpc_client() as client:
        assert client.get_model_metadata("versioned", as_json=True)["versions"] == ["2", "3"]  # latest 2
        for version, expected in (("", 3), ("2", 2), ("3", 3)):
            item = grpcclient.InferInput("X", [1, 4], "FP32")
            item.set_data_from_numpy(x)
            result = client.infer("versioned", [item], model_version=version)
            assert int(result.as_numpy("version")[0, 0]) == expected
        item = grpcclient.InferInput("X", [1, 4], "FP32")
        item.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException, match=r"version 1 is not (found|ready)") as info:
            client.infer("versioned", [item], model_version="1")
        assert info.value.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")


def test_broken_models_are_unavailable_with_reasons(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        for name, reason in BROKEN.items():
            assert index[name]["state"] == "UNAVAILABLE", name
            assert reason in index[name]["reason"], (name, index[name])
            assert not client.is_model_ready(name)
        assert index["add_sub"]["state"] == "READY"
        # the failures are in the log too
        log = server.log_text()
        for name in BROKEN:
            assert f"'{name}'" in log


def test_statistics_count_inferences(server: RuntimeProcess) -> None:
    a = np.ones((3, 16), np.float32)
    with server.grpc_client() as client:
        before = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
        client.infer("add_sub", add_sub_inputs(a, a))
        after = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
        assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 3
        assert int(after["inference_stats"]["success"]["count"]) == int(
            before["inference_stats"].get("success", {}).get("count", 0)
        ) + 1
        assert int(after["inference_stats"]["compute_infer"]["ns"]) > 0
        everything = client.get_inference_statistics(as_json=True)["model_stats"]
        assert {"add_sub", "py_add_sub"} <= {m["name"] for m in everything}


def test_grpc_health_service(server: RuntimeProcess) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert response.status == health_pb2.HealthCheckResponse.SERVING
