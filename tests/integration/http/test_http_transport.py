"""tritonclient.http, unchanged, against the HTTP transport over a real DataPlane and ONNX Runtime models."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.integration.http.http_harness import MAX_BODY_BYTES, Served


@pytest.fixture(scope="module")
def client(server: Served) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(url=server.url, network_timeout=60.0)
    try:
        yield c
    finally:
        c.close()


def _input(name: str, array: np.ndarray[Any, Any], wire: str, binary: bool) -> httpclient.InferInput:
    item = httpclient.InferInput(name, list(array.shape), wire)
    item.set_data_from_numpy(array, binary_data=binary)
    return item


def _add_inputs(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], binary: bool) -> list[httpclient.InferInput]:
    return [_input("INPUT0", a, "FP32", binary), _input("INPUT1", b, "FP32", binary)]


def _raw(server: Served, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    host, port = server.url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()  # names: lower case
    finally:
        conn.close()


def _fails(call: Any, status: str | set[str], *fragments: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    message = str(info.value.message())
    assert info.value.status() in ({status} if isinstance(status, str) else status), message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ---- health and metadata ----------------------------------------------------------------------------------


def test_health_and_readiness(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add")
    assert client.is_model_ready("add", "1")
    assert not client.is_model_ready("add", "9")
    assert not client.is_model_ready("nope")


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_server_metadata()
    assert meta["name"] == "ensemble-runtime"
    assert {"binary_tensor_data", "model_repository", "statistics"} <= set(meta["extensions"])


def test_model_metadata_with_batch_dimension(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("add")
    assert (meta["name"], meta["versions"], meta["platform"]) == ("add", ["1"], "onnxruntime_onnx")
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 4]},
    ]
    assert [o["name"] for o in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert client.get_model_metadata("half", "1")["inputs"] == [{"name": "X", "datatype": "FP16", "shape": [2, 2]}]
    assert client.get_model_metadata("ident")["outputs"][2] == {"name": "OS", "datatype": "BYTES", "shape": [-1, 2]}
    _fails(lambda: client.get_model_metadata("nope"), "404", "Request for unknown model: 'nope' is not found")


def test_model_config(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("add")
    assert config["name"] == "add" and config["max_batch_size"] == 8
    assert config["input"][0] == {**config["input"][0], "name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}
    assert client.get_model_config("half", "1")["max_batch_size"] == 0
    assert client.get_model_config("pipe")["ensemble_scheduling"]["step"][0]["model_version"] == -1
    _fails(lambda: client.get_model_config("nope"), "404", "'nope'")


# ---- inference ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_fp32(client: httpclient.InferenceServerClient, binary: bool) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add", _add_inputs(a, b, binary), outputs=outputs, request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response["model_name"], response["model_version"], response["id"]) == ("add", "1", "r-1")
    assert ("data" in result.get_output("OUTPUT0")) is not binary


def test_infer_without_named_outputs_returns_all_in_binary(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 4), dtype=np.float32)
    result = client.infer("add", _add_inputs(a, a, binary=False), model_version="1")
    assert "binary_data_size" in result.get_output("OUTPUT0")["parameters"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 4), dtype=np.float32))


def test_output_subset(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((3, 4), dtype=np.float32)
    result = client.infer("add", _add_inputs(a, a, True), outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert result.get_output("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((3, 4), dtype=np.float32))


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_int64_bool_bytes(client: httpclient.InferenceServerClient, binary: bool) -> None:
    i64 = np.array([[-(2**62), 0, 2**62]], dtype=np.int64)
    flags = np.array([[True, False]], dtype=np.bool_)
    strings = np.array([["hello", "wörld"]], dtype=np.object_)
    inputs = [_input("I64", i64, "INT64", binary), _input("B", flags, "BOOL", binary),
              _input("S", strings, "BYTES", binary)]  # fmt: skip
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("O64", "OB", "OS")]
    result = client.infer("ident", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("O64"), i64)
    np.testing.assert_array_equal(result.as_numpy("OB"), flags)
    text = [[x.decode() if isinstance(x, bytes) else x for x in row] for row in result.as_numpy("OS")]
    assert text == [["hello", "wörld"]]  # tritonclient gives str from JSON, bytes from binary


def test_infer_fp16_without_batching(client: httpclient.InferenceServerClient) -> None:
    x = np.array([[0.5, -1], [2, 1024]], dtype=np.float16)
    result = client.infer(
        "half", [_input("X", x, "FP16", False)], outputs=[httpclient.InferRequestedOutput("Y", False)]
    )
    np.testing.assert_array_equal(result.as_numpy("Y"), x)


def test_ensemble_infer_and_versions(server: Served, client: httpclient.InferenceServerClient) -> None:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    inputs = [_input("A", a, "FP32", True), _input("B", a, "FP32", False)]
    result = client.infer("pipe", inputs)
    np.testing.assert_array_equal(result.as_numpy("SUM"), a * 2)
    assert result.get_response()["parameters"] == {"ensemble_versions": "add:1"}
    status, _, body = _raw(server, "GET", "/v2/ensembles/pipe/versions")
    assert (status, json.loads(body)) == (200, {"ensemble": "pipe", "versions": {"add": 1}})
    status, _, body = _raw(server, "GET", "/v2/ensembles/add/versions")
    assert (status, json.loads(body)) == (404, {"error": "'add' is not a loaded ensemble"})


def test_compressed_request_and_response(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(400, dtype=np.float32).reshape(100, 4) % 7
    for algorithm in ("gzip", "deflate"):
        result = client.infer(
            "add",
            _add_inputs(a[:8], a[:8], True),
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a[:8] * 2)


def test_aio_client(server: Served) -> None:
    async def run() -> np.ndarray[Any, Any]:
        async with aioclient.InferenceServerClient(url=server.url) as c:
            assert await c.is_model_ready("add")
            a = np.ones((2, 4), dtype=np.float32)
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                item = aioclient.InferInput(name, [2, 4], "FP32")
                item.set_data_from_numpy(a)
                inputs.append(item)
            result = await c.infer("add", inputs)
            out: np.ndarray[Any, Any] = result.as_numpy("OUTPUT0")
            return out

    np.testing.assert_array_equal(asyncio.run(run()), np.full((2, 4), 2, dtype=np.float32))


# ---- errors -------------------------------------------------------------------------------------------------


def test_unknown_model(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 4), dtype=np.float32)
    _fails(lambda: client.infer("nope", _add_inputs(a, a, True)), "404", "Request for unknown model: 'nope'")
    _fails(lambda: client.infer("add", _add_inputs(a, a, True), model_version="7"), "404", "'add' version 7")


def test_wrong_datatype_shape_and_missing_input(client: httpclient.InferenceServerClient) -> None:
    good = np.ones((1, 4), dtype=np.float32)
    wrong_type = [
        _input("INPUT0", np.ones((1, 4), dtype=np.int32), "INT32", True),
        _input("INPUT1", good, "FP32", True),
    ]
    _fails(lambda: client.infer("add", wrong_type), "400", "'INPUT0'", "INT32", "FP32")
    wrong_shape = _add_inputs(np.ones((1, 5), dtype=np.float32), np.ones((1, 5), dtype=np.float32), False)
    _fails(lambda: client.infer("add", wrong_shape), "400", "input 'INPUT0'", "[-1, 4]")
    too_big = np.ones((9, 4), dtype=np.float32)
    _fails(lambda: client.infer("add", _add_inputs(too_big, too_big, True)), "400", "batch-size must be <= 8")
    _fails(lambda: client.infer("add", [_input("INPUT0", good, "FP32", True)]), "400", "INPUT1")
    outputs = [httpclient.InferRequestedOutput("NOPE")]
    _fails(lambda: client.infer("add", _add_inputs(good, good, True), outputs=outputs), "400", "'NOPE'")


def test_malformed_bodies_get_400_naming_the_problem(server: Served) -> None:
    status, headers, body = _raw(server, "POST", "/v2/models/add/infer", b'{"inputs": [')
    assert status == 400 and headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"].startswith("malformed JSON in the inference request")

    header = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 12}},
                         {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}  # fmt: skip
    head = json.dumps(header).encode()
    status, _, body = _raw(
        server, "POST", "/v2/models/add/infer", head + b"\0" * 12, {"Inference-Header-Content-Length": str(len(head))}
    )
    assert status == 400
    assert "unexpected total byte size 12 for input 'INPUT0', expecting 16" in json.loads(body)["error"]

    header = {"inputs": [{"name": "INPUT0", "datatype": "FLOAT32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    status, _, body = _raw(server, "POST", "/v2/models/add/infer", json.dumps(header).encode())
    assert (status, json.loads(body)) == (
        400,
        {"error": "input 'INPUT0' has unknown or unsupported datatype 'FLOAT32'"},
    )

    status, _, body = _raw(server, "POST", "/v2/repository/models/spare/load", b'{"parameters": {"config": "{nope"}}')
    error = json.loads(body)["error"]  # Triton: 500 "failed to load '<model>', ..."
    assert status == 500 and error.startswith("failed to load 'spare'") and "not a valid JSON model config" in error


def test_body_limit_gives_a_clean_413(server: Served) -> None:
    status, _, body = _raw(server, "POST", "/v2/models/add/infer", b" " * (MAX_BODY_BYTES + 1024))
    assert (status, json.loads(body)) == (413, {"error": f"request body exceeds the limit of {MAX_BODY_BYTES} bytes"})
    status, _, _ = _raw(server, "GET", "/v2/health/live")
    assert status == 200


def test_unknown_route_and_method(server: Served) -> None:
    status, _, body = _raw(server, "GET", "/v2/nothing/here")
    assert status == 404 and "error" in json.loads(body)
    status, _, body = _raw(server, "GET", "/v2/models/add/infer")
    assert status == 405 and "error" in json.loads(body)


# ---- repository and statistics ------------------------------------------------------------------------------


def test_index_load_override_and_unload(client: httpclient.InferenceServerClient) -> None:
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["add"] == {"name": "add", "version": "1", "state": "READY"}
    assert index["spare"] == {"name": "spare"}
    assert not client.is_model_ready("spare")

    client.load_model("spare")
    assert client.is_model_ready("spare")
    a = np.ones((4, 4), dtype=np.float32)
    np.testing.assert_array_equal(client.infer("spare", _add_inputs(a, a, True)).as_numpy("OUTPUT0"), a * 2)
    ready = [m["name"] for m in client.get_model_repository_index(query_params=None)]
    assert "spare" in ready

    config = client.get_model_config("spare")
    config["max_batch_size"] = 2
    client.load_model("spare", config=json.dumps(config))
    assert client.get_model_config("spare")["max_batch_size"] == 2
    _fails(lambda: client.infer("spare", _add_inputs(a, a, True)), "400", "batch-size must be <= 2")

    client.unload_model("spare")
    assert not client.is_model_ready("spare")
    assert client.get_model_repository_index()[-1]["name"] in {"spare", "pipe"}
    # 503 while the unloaded version drains, 404 once it is gone
    _fails(lambda: client.infer("spare", _add_inputs(a, a, True)), {"503", "404"}, "'spare'")
    _fails(lambda: client.load_model("missing"), "500", "failed to load ", "'missing' is not in any model repository")


def test_statistics_count_inferences(client: httpclient.InferenceServerClient) -> None:
    def stats() -> dict[str, Any]:
        entries: list[dict[str, Any]] = client.get_inference_statistics("ident")["model_stats"]
        assert [(e["name"], e["version"]) for e in entries] == [("ident", "1")]
        return entries[0]

    before = stats()
    flags = np.array([[True, False]] * 3, dtype=np.bool_)
    inputs = [_input("I64", np.zeros((3, 3), dtype=np.int64), "INT64", True), _input("B", flags, "BOOL", True),
              _input("S", np.full((3, 2), "x", dtype=np.object_), "BYTES", True)]  # fmt: skip
    client.infer("ident", inputs)
    after = stats()
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["inference_count"] > before["inference_count"]
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["last_inference"] > 0
    assert sum(b["compute_infer"]["count"] for b in after["batch_stats"]) == after["execution_count"]
    every = {e["name"] for e in client.get_inference_statistics()["model_stats"]}
    assert {"add", "ident", "half", "pipe"} <= every
    assert client.get_inference_statistics("add", "1")["model_stats"][0]["version"] == "1"
    _fails(lambda: client.get_inference_statistics("nope"), "404", "'nope'")
