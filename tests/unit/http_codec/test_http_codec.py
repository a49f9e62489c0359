"""The HTTP codec on its own: JSON and binary tensors both ways, checked against tritonclient's own encoder."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import InferResponse
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol import http_documents as documents
from ensemble_runtime.repository_index import IndexEntry
from ensemble_runtime.stats import ComputeTimes, ModelStats
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc


def _request(header: dict[str, Any], binary: bytes = b"") -> codec.DecodedInfer:
    head = json.dumps(header).encode()
    return codec.decode_infer_request(head + binary, str(len(head)) if binary else None, "m")


def _one(wire: str, shape: list[int], data: object) -> Any:
    decoded = _request({"inputs": [{"name": "x", "datatype": wire, "shape": shape, "data": data}]})
    return decoded.request.inputs["x"]


def _rejects(match: str, header: dict[str, Any] | bytes, binary: bytes = b"", length: str | None = None) -> None:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    with pytest.raises(InferenceError, match=match) as info:
        codec.decode_infer_request(body + binary, length if length else str(len(body)) if binary else None, "m")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


# ---- JSON tensors ----------------------------------------------------------------------------------------


def test_nested_and_flat_json_data_give_the_same_row_major_array() -> None:
    nested = _one("FP32", [2, 3], [[1, 2, 3], [4.5, 5, 6]])
    flat = _one("FP32", [2, 3], [1, 2, 3, 4.5, 5, 6])
    assert nested.dtype == np.float32 and nested.shape == (2, 3)
    np.testing.assert_array_equal(nested, flat)
    np.testing.assert_array_equal(nested[1], [4.5, 5, 6])


def test_ragged_nesting_is_accepted_when_the_element_count_matches() -> None:
    np.testing.assert_array_equal(_one("INT32", [2, 2], [[1], [2, 3], 4]), [[1, 2], [3, 4]])


@pytest.mark.parametrize(
    ("wire", "data", "dtype"),
    [
        ("BOOL", [True, False], np.bool_),
        ("INT64", [-(2**63), 2**63 - 1], np.int64),
        ("UINT64", [0, 2**64 - 1], np.uint64),
        ("UINT8", [0, 255], np.uint8),
        ("FP16", [0.5, 2], np.float16),
        ("FP64", [1e300, -1], np.float64),
    ],
)
def test_json_values_keep_their_datatype(wire: str, data: list[Any], dtype: type) -> None:
    array = _one(wire, [2], data)
    assert array.dtype == dtype
    assert array.tolist() == data


def test_bytes_from_json_strings() -> None:
    array = _one("BYTES", [1, 2], [["hello", "wörld"]])
    assert array.dtype == np.object_ and array.shape == (1, 2)
    assert array.tolist() == [[b"hello", "wörld".encode()]]


@pytest.mark.parametrize(
    ("wire", "data", "match"),
    [
        ("FP32", [1, 2, 3], r"unexpected number of elements 3 in 'data' for input 'x', expecting 4"),
        ("FP32", ["a", "b", "c", "d"], r"input 'x': 'data' must hold only numbers for datatype FP32"),
        ("INT32", [1.5, 2, 3, 4], r"input 'x': 'data' must hold only integers for datatype INT32"),
        ("INT8", [1, 2, 3, 300], r"input 'x': a value in 'data' is out of range for datatype INT8"),
        ("UINT8", [1, 2, 3, -1], r"input 'x': a value in 'data' is out of range for datatype UINT8"),
        ("BOOL", [1, 0, 1, 0], r"input 'x': 'data' must hold only booleans for datatype BOOL"),
        ("BYTES", ["a", 1, "b", "c"], r"input 'x': 'data' must hold only strings for datatype BYTES"),
        ("FP32", [{"a": 1}, 2, 3, 4], r"input 'x': 'data' must hold only numbers"),
        ("FP32", 5, r"input 'x': 'data' must be a JSON array"),
        ("BYTES", ["a", "b", "c", "\ud800"], r"input 'x': a string in 'data' is not valid Unicode"),
    ],
)
def test_bad_json_data_is_rejected_naming_the_tensor(wire: str, data: object, match: str) -> None:
    _rejects(match, {"inputs": [{"name": "x", "datatype": wire, "shape": [4], "data": data}]})


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"name": "x", "datatype": "FLOAT", "shape": [1], "data": [1]}, r"input 'x' has unknown .*'FLOAT'"),
        ({"name": "x", "datatype": "BF16", "shape": [1], "data": [1]}, r"input 'x' has unknown or unsupported"),
        ({"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}, r"input 'x' has a negative dimension"),
        ({"name": "x", "datatype": "FP32", "shape": "1", "data": [1]}, r"input 'x': 'shape' must be a list"),
        ({"name": "x", "datatype": "FP32", "shape": [1]}, r"input 'x' has neither 'data' nor"),
        ({"datatype": "FP32", "shape": [1], "data": [1]}, r"inputs\[0\] has no 'name'"),
        (
            {"name": "x", "datatype": "FP32", "shape": [1], "parameters": {"shared_memory_region": "r"}},
            r"input 'x': shared memory is not supported",
        ),
    ],
)
def test_bad_input_entries_are_rejected(entry: dict[str, Any], match: str) -> None:
    _rejects(match, {"inputs": [entry]})


def test_error_bodies_survive_any_text() -> None:
    assert json.loads(codec.error_body("input '\ud800' and 'wörld'")) == {"error": "input '\ud800' and 'wörld'"}


def test_malformed_request_headers_are_rejected() -> None:
    _rejects(r"malformed JSON in the inference request", b'{"inputs": [')
    _rejects(r"the inference request must be a JSON object, got list", b"[1, 2]")
    _rejects(r"has no 'inputs' array", {"id": "1"})
    _rejects(r"request 'id' must be a string", {"id": 7, "inputs": []})
    _rejects(r"parameter 'p' of the request must be a string, number or boolean", {"parameters": {"p": [1]}})
    entry = {"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}
    _rejects(r"input 'x' is given more than once", {"inputs": [entry, entry]})


# ---- binary tensors ----------------------------------------------------------------------------------------


def test_binary_inputs_as_tritonclient_encodes_them() -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.array([[True, False]], dtype=np.bool_)
    s = np.array([[b"ab", b"\x00\xff"]], dtype=np.object_)
    inputs = []
    for name, array, wire in (("a", a, "FP32"), ("b", b, "BOOL"), ("s", s, "BYTES")):
        item = httpclient.InferInput(name, list(array.shape), wire)
        item.set_data_from_numpy(array, binary_data=True)
        inputs.append(item)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, request_id="r1")
    decoded = codec.decode_infer_request(body, str(json_size), "m", "2")
    got = decoded.request
    assert (got.model_name, got.model_version, got.id) == ("m", "2", "r1")
    np.testing.assert_array_equal(got.inputs["a"], a)
    np.testing.assert_array_equal(got.inputs["b"], b)
    assert got.inputs["s"].tolist() == s.tolist()
    assert decoded.declared == {"a": "FP32", "b": "BOOL", "s": "BYTES"}
    assert decoded.binary_default  # tritonclient asks for binary outputs when it names none


def test_mixed_json_and_binary_inputs() -> None:
    raw = np.array([1, 2], dtype=np.int64).tobytes()
    decoded = _request(
        {
            "inputs": [
                {"name": "j", "datatype": "FP32", "shape": [1], "data": [3]},
                {"name": "b", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": 16}},
            ]
        },
        raw,
    )
    assert decoded.request.inputs["b"].tolist() == [1, 2]
    assert decoded.request.inputs["j"].tolist() == [3.0]


def _binary_entry(size: int, wire: str = "FP32", shape: list[int] | None = None) -> dict[str, Any]:
    return {
        "inputs": [{"name": "x", "datatype": wire, "shape": shape or [2], "parameters": {"binary_data_size": size}}]
    }


def test_wrong_binary_sizes_are_rejected_naming_the_tensor() -> None:
    _rejects(r"unexpected total byte size 4 for input 'x', expecting 8", _binary_entry(4), b"\0" * 4)
    _rejects(r"input 'x': binary_data_size 12 runs past the end", _binary_entry(12), b"\0" * 8)
    _rejects(r"4 bytes of binary data that no input claims", _binary_entry(8), b"\0" * 12)
    _rejects(r"input 'x': 'binary_data_size' must be a non-negative integer", _binary_entry(-1), b"\0")
    bad_bytes = struct.pack("<I", 10) + b"abc"
    _rejects(r"input 'x': element 0 declares 10 bytes", _binary_entry(len(bad_bytes), "BYTES", [1]), bad_bytes)


def test_bad_header_lengths_are_rejected() -> None:
    body = json.dumps(_binary_entry(8)).encode()
    _rejects(r"Inference-Header-Content-Length is 9999 but the request body has", body, b"\0" * 8, "9999")
    _rejects(r"Inference-Header-Content-Length must be an integer", body, b"\0" * 8, "abc")
    _rejects(r"malformed JSON", body, b"\0" * 8, str(len(body) - 3))


# ---- responses ---------------------------------------------------------------------------------------------


def _response() -> InferResponse:
    strings = np.empty(2, dtype=np.object_)
    strings[:] = [b"x", "ü".encode()]
    return InferResponse(
        model_name="m",
        model_version="3",
        outputs={
            "f": np.arange(6, dtype=np.float16).reshape(2, 3),
            "i": np.array([[-1, 7]], dtype=np.int64),
            "b": np.array([True, False]),
            "s": strings,
        },
        id="req-9",
        parameters={"ensemble_versions": "a:1,b:2"},
    )


def test_json_response_round_trips_through_tritonclient() -> None:
    decoded = _request({"inputs": []})
    body, header_length = codec.encode_infer_response(_response(), decoded)
    assert header_length is None
    result = httpclient.InferResult.from_response_body(body)
    response = result.get_response()
    assert response["id"] == "req-9" and response["model_version"] == "3"
    assert response["parameters"] == {"ensemble_versions": "a:1,b:2"}
    np.testing.assert_array_equal(result.as_numpy("f"), np.arange(6).reshape(2, 3))
    assert result.as_numpy("i").tolist() == [[-1, 7]]
    assert result.as_numpy("b").tolist() == [True, False]
    assert [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("s").tolist()] == ["x", "ü"]


def test_binary_response_round_trips_through_tritonclient() -> None:
    decoded = _request(
        {"inputs": [], "outputs": [{"name": "f", "parameters": {"binary_data": False}}, {"name": "s"}],
         "parameters": {"binary_data_output": True}}
    )  # fmt: skip
    assert not decoded.binary("f") and decoded.binary("s") and decoded.binary("other")
    body, header_length = codec.encode_infer_response(_response(), decoded)
    assert header_length is not None and header_length < len(body)
    result = httpclient.InferResult.from_response_body(body, header_length=header_length)
    assert "data" in result.get_output("f") and "data" not in result.get_output("s")
    for name, array in _response().outputs.items():
        assert result.as_numpy(name).tolist() == array.tolist(), name
        assert result.as_numpy(name).dtype == (array.dtype if array.dtype != np.object_ else np.object_)


def test_non_utf8_bytes_need_binary_output() -> None:
    raw = np.empty(1, dtype=np.object_)
    raw[0] = b"\xff\xfe"
    response = InferResponse("m", "1", {"s": raw})
    with pytest.raises(InferenceError, match=r"output 's' holds bytes that are not UTF-8 text"):
        codec.encode_infer_response(response, _request({"inputs": []}))


# ---- metadata, config, stats, repository -------------------------------------------------------------------


def test_config_json_is_tritons_shape() -> None:
    config = text_format.Parse(
        'name: "m" platform: "onnxruntime_onnx" '
        'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } '
        'output { name: "y" data_type: TYPE_STRING dims: [ -1, 2 ] } '
        "dynamic_batching { max_queue_delay_microseconds: 100 } "
        'parameters { key: "k" value { string_value: "v" } }',
        mc.ModelConfig(),
    )
    got = documents.model_config_json(config)
    assert got["max_batch_size"] == 0  # defaults are printed, as Triton does
    assert got["input"][0]["dims"] == [4] and got["output"][0]["dims"] == [-1, 2]
    assert got["output"][0]["data_type"] == "TYPE_STRING"
    assert got["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert got["parameters"] == {"k": {"string_value": "v"}}
    json.dumps(got)


def test_load_config_override_turns_json_into_pbtxt() -> None:
    override = json.dumps({"name": "m", "max_batch_size": 4, "input": [{"name": "x", "dims": [4]}]})
    text = documents.load_config_override(json.dumps({"parameters": {"config": override}}).encode(), "m")
    assert text is not None
    parsed = text_format.Parse(text, mc.ModelConfig())
    assert parsed.max_batch_size == 4 and list(parsed.input[0].dims) == [4]
    assert documents.load_config_override(b"", "m") is None
    assert documents.load_config_override(b"{}", "m") is None
    with pytest.raises(InferenceError, match=r"'config' is not a valid JSON model config") as info:
        documents.load_config_override(json.dumps({"parameters": {"config": '{"nope": 1}'}}).encode(), "m")
    assert info.value.code is ErrorCode.INTERNAL and str(info.value).startswith("failed to load 'm'")
    with pytest.raises(InferenceError) as info:
        documents.load_config_override(json.dumps({"parameters": {"file:1/model.onnx": "AAA"}}).encode(), "m")
    assert info.value.code is ErrorCode.UNIMPLEMENTED


def test_repository_index_leaves_out_what_is_unknown() -> None:
    entries = [
        IndexEntry("a", "1", "READY", ""),
        IndexEntry("b", "", "", ""),
        IndexEntry("c", "", "UNAVAILABLE", "bad"),
    ]
    assert documents.repository_index(entries) == [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "b"},
        {"name": "c", "state": "UNAVAILABLE", "reason": "bad"},
    ]
    assert documents.index_ready_only(b'{"ready": true}') is True
    assert documents.index_ready_only(b"") is False


def test_statistics_json() -> None:
    stats = ModelStats()
    stats.success.add(50)
    compute = ComputeTimes(input_ns=5, infer_ns=30, output_ns=7)
    stats.record_request(3, queue_ns=11, compute=compute)
    stats.record_request(1, queue_ns=13, compute=compute)
    stats.record_execution(4, compute, now_ms=1234)
    got = documents.model_statistics([("m", 2, stats)])["model_stats"][0]
    assert (got["name"], got["version"], got["inference_count"], got["execution_count"]) == ("m", "2", 4, 1)
    assert got["last_inference"] == 1234
    assert got["inference_stats"]["success"] == {"count": 1, "ns": 50}
    assert got["inference_stats"]["queue"] == {"count": 2, "ns": 24}
    assert got["inference_stats"]["compute_input"] == {"count": 2, "ns": 10}
    assert got["inference_stats"]["compute_infer"] == {"count": 2, "ns": 60}
    assert got["inference_stats"]["compute_output"] == {"count": 2, "ns": 14}
    assert got["inference_stats"]["cache_hit"] == {"count": 0, "ns": 0}
    assert got["response_stats"] == {}
    assert got["batch_stats"] == [
        {
            "batch_size": 4,
            "compute_input": {"count": 1, "ns": 5},
            "compute_infer": {"count": 1, "ns": 30},
            "compute_output": {"count": 1, "ns": 7},
        }
    ]
