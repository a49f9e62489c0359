"""The native HTTP core reads an infer body of the common shapes itself (`_native.binary_infer`, as
`HttpCall.binary`): binary inputs, and JSON `data` of numbers, booleans and strings; Python decodes everything
else. For any body, what the core read and Python finished
(`native_http.decode_binary`) must be exactly what Python's own decoder makes of it: the same request (values,
their types, the order of parameters and outputs) or the same error. In process: no server needed.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol._native import binary_infer
from ensemble_runtime.protocol.native_http import decode_binary
from hypothesis import given
from hypothesis import strategies as st

from tests.property import wire
from tests.property.plans import CHARS, Plan, mutated_plans, valid_plans

MODEL = "m"


def _typed(params: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(k, type(v).__name__, v) for k, v in params.items()]


def _summary(decoded: codec.DecodedInfer) -> tuple[Any, ...]:
    request = decoded.request
    inputs = [
        (name, str(array.dtype), array.shape, array.tobytes() if array.dtype != np.object_ else list(array.reshape(-1)))
        for name, array in request.inputs.items()
    ]
    outputs = [(name, _typed(params)) for name, params in request.output_parameters.items()]
    return (request.model_name, request.model_version, request.id, _typed(request.parameters), inputs,
            request.requested_outputs, outputs, decoded.declared, decoded.binary_default)


def _outcome(decode: Any) -> tuple[Any, ...]:
    try:
        return ("decoded", _summary(decode()))
    except InferenceError as exc:
        return ("refused", exc.code, exc.message)


def _same(body: bytes, header_length: str | None) -> bool:
    """Whether the core read the body; if it did, asserts Python finishes it as its own decoder does."""
    binary = binary_infer(header_length, body)
    if binary is None:
        return False
    ours = _outcome(lambda: decode_binary(binary, MODEL, "2"))
    python = _outcome(lambda: codec.decode_infer_request(body, header_length, MODEL, "2"))
    assert ours == python
    return True


def _length(length: int | None) -> str | None:
    return None if length is None else str(length)


@given(plan=mutated_plans() | valid_plans())
def test_what_the_core_reads_python_reads_alike(plan: Plan) -> None:
    body, length = wire.http_body(plan)
    _same(body, _length(length))


@given(plan=valid_plans(json_ok=False))
def test_the_core_reads_every_valid_binary_request(plan: Plan) -> None:
    plan = replace(plan, inputs=tuple(replace(i, as_json=False) for i in plan.inputs))
    body, length = wire.http_body(plan)
    if length is None:  # no input at all: the whole body is the header
        assert _same(body, None)
        return
    assert _same(body, str(length)), body[:length]


# Values a careless client puts anywhere in the header: every JSON kind, integers past 64 bits, floats written
# as integers, long strings.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(CHARS, max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(CHARS, max_size=8), inner, max_size=4),
    max_leaves=12,
)
KEYS = ("id", "parameters", "inputs", "outputs", "name", "datatype", "shape", "data", "binary_data_size",
        "binary_data", "binary_data_output", "shared_memory_region", "p")


@st.composite
def scrambled_headers(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A valid binary request whose header has values replaced or added at random places."""
    plan = draw(valid_plans(json_ok=False))
    plan = replace(plan, inputs=tuple(replace(i, as_json=False) for i in plan.inputs))
    body, length = wire.http_body(plan)
    split = len(body) if length is None else length
    header: Any = json.loads(body[:split])
    for _ in range(draw(st.integers(1, 3))):
        node = header
        for _depth in range(draw(st.integers(0, 4))):
            keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
            if not keys:
                break
            child = node[draw(st.sampled_from(keys))]
            if not isinstance(child, dict | list):
                break
            node = child
        value = draw(JSON)
        if isinstance(node, dict):
            node[draw(st.sampled_from(KEYS))] = value
        elif isinstance(node, list) and node:
            node[draw(st.integers(0, len(node) - 1))] = value
    head = json.dumps(header, ensure_ascii=draw(st.booleans())).encode()
    return head + body[split:], str(len(head)) if length is not None else None


@given(case=scrambled_headers())
def test_a_scrambled_header_is_read_alike_or_left_to_python(case: tuple[bytes, str | None]) -> None:
    _same(*case)


def test_parameters_keep_their_order_types_and_last_value() -> None:
    header = (
        b'{"id":"a\\u00e9\\ud83d\\ude00","parameters":{"z":1,"f":1.5,"e":1E2,"n":-0.0,"big":18446744073709551615,'
        b'"neg":-9223372036854775808,"t":true,"s":"x","z":"last","tiny":5e-324,"exp":0.1},'
        b'"inputs":[{"name":"X","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8,"q":2}}],'
        b'"outputs":[{"name":"B","parameters":{"binary_data":false,"k":3}},{"name":"A"}]}'
    )
    body = header + np.array([1, 2], np.int32).tobytes()
    assert _same(body, str(len(header)))
    binary = binary_infer(str(len(header)), body)
    assert binary is not None
    assert list(binary.parameters) == ["z", "f", "e", "n", "big", "neg", "t", "s", "tiny", "exp"]
    negative_zero = binary.parameters["n"]
    assert binary.parameters["z"] == "last" and isinstance(negative_zero, float) and math.copysign(1, negative_zero) < 0


def test_refusals_keep_python_messages() -> None:
    """Bodies the core leaves to Python, each refused there with its own message."""
    good = {"name": "X", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}
    data = bytes(8)
    cases = [
        {"inputs": [dict(good, parameters={"binary_data_size": 8.0})]},
        {"inputs": [dict(good, datatype="BF16")]},
        {"inputs": [good, good]},
        {"inputs": [dict(good, parameters={"binary_data_size": 4})]},
        {"id": 7, "inputs": [good]},
        {"parameters": {"binary_data_output": "yes"}, "inputs": [good]},
        {"inputs": [good], "outputs": [{"name": "Y", "parameters": {"binary_data": 1}}]},
        {"inputs": [good], "outputs": [{"name": "Y"}, {"name": "Y"}]},
    ]
    for case in cases:
        head = json.dumps(case).encode()
        assert binary_infer(str(len(head)), head + data) is None, case
        try:
            codec.decode_infer_request(head + data, str(len(head)), MODEL)
        except InferenceError:
            continue
        raise AssertionError(f"Python took {case}")


def test_tritonclient_bodies_are_read_by_the_core() -> None:
    """The bytes tritonclient.http itself sends (binary inputs, binary or JSON outputs)."""
    x = httpclient.InferInput("X", [1, 4], "FP32")
    x.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4), binary_data=True)
    s = httpclient.InferInput("S", [2], "BYTES")
    s.set_data_from_numpy(np.array([b"a", "é".encode()], dtype=np.object_), binary_data=True)
    outputs = [httpclient.InferRequestedOutput("Y", binary_data=True), httpclient.InferRequestedOutput("Z", binary_data=False)]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [x, s], outputs=outputs, request_id="7", parameters={"custom": 3}
    )
    assert json_size is not None
    assert _same(body, str(json_size))


def test_a_json_body_of_numbers_is_read_by_the_core() -> None:
    x = httpclient.InferInput("X", [2], "INT32")
    x.set_data_from_numpy(np.array([1, 2], np.int32), binary_data=False)
    y = httpclient.InferInput("Y", [1, 3], "FP32")
    y.set_data_from_numpy(np.array([[0.1, -2.5, 3e-40]], np.float32), binary_data=False)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([x, y])
    assert json_size is None
    assert _same(body, None)


def test_json_bytes_and_fp16_are_read_by_the_core() -> None:
    s = httpclient.InferInput("S", [3], "BYTES")
    s.set_data_from_numpy(np.array([b"a", "\u00e9".encode(), b""], np.object_), binary_data=False)
    h = httpclient.InferInput("H", [3], "FP16")
    h.set_data_from_numpy(np.array([0.5, -65504, 6e-8], np.float16), binary_data=False)
    body, _ = httpclient.InferenceServerClient.generate_request_body([s, h])
    assert _same(body, None)


NUMERIC = ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP16", "FP32", "FP64",
           "BYTES")
LEAVES = {
    "BOOL": st.booleans(),
    "INT8": st.integers(-(2**7), 2**7 - 1), "INT16": st.integers(-(2**15), 2**15 - 1),
    "INT32": st.integers(-(2**31), 2**31 - 1), "INT64": st.integers(-(2**63), 2**63 - 1),
    "UINT8": st.integers(0, 2**8 - 1), "UINT16": st.integers(0, 2**16 - 1),
    "UINT32": st.integers(0, 2**32 - 1), "UINT64": st.integers(0, 2**64 - 1),
    "FP16": (st.floats(width=16, allow_nan=False, allow_infinity=False) | st.integers(-2048, 2048)
             | st.floats(-65519, 65519) | st.floats(-1e-4, 1e-4)),
    "FP32": st.floats(width=32, allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53),
    "FP64": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53),
    "BYTES": st.text(st.characters(exclude_categories=["Cs"]), max_size=6),
}
# What a careless client sends instead: values of another kind, out of range, or too many digits for a double.
STRAYS: st.SearchStrategy[Any] = (st.booleans() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=False, allow_infinity=False)
          | st.sampled_from([None, "1", 1e39, -1e39, 2**53 + 1, 65520.0, 4097, "\ud800", [{}]]))


def _nested(values: list[Any], draw: st.DrawFn) -> list[Any]:
    """`values` in rows (when they split evenly), sometimes ragged: Python flattens either in row-major order."""
    if len(values) > 2 and draw(st.booleans()):
        cut = draw(st.integers(1, len(values) - 1))
        return [values[:cut], [values[cut:]]] if draw(st.booleans()) else [values[:cut], *values[cut:]]
    return values


@st.composite
def json_bodies(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A body whose inputs all carry JSON `data`, and whether every value is one the core reads."""
    inputs: list[dict[str, Any]] = []
    clean = True
    for i in range(draw(st.integers(1, 3))):
        wire = draw(st.sampled_from(NUMERIC))
        shape = draw(st.lists(st.integers(1, 3), max_size=3))
        values: list[Any] = draw(st.lists(LEAVES[wire], min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        if draw(st.integers(0, 4)) == 0:  # one value replaced by a stray one
            values[draw(st.integers(0, len(values) - 1))] = draw(STRAYS)
            clean = False
        inputs.append({"name": f"I{i}", "datatype": wire, "shape": shape, "data": _nested(values, draw)})
    return json.dumps({"inputs": inputs}).encode(), clean


@given(case=json_bodies())
def test_json_numbers_are_read_by_the_core_as_python_reads_them(case: tuple[bytes, bool]) -> None:
    body, clean = case
    read = _same(body, None)
    assert read or not clean, body
