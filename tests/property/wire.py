"""Plans to wire bytes and back, for both transports; a raw gRPC channel and a raw HTTP connection."""

from __future__ import annotations

import http.client
import json
import struct
import urllib.parse
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from tests.property.plans import Arrays, InputPlan, Plan

TIMEOUT_S = 20.0  # per request: a hang fails the example
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
TYPED_FIELD = {"FP32": "fp32_contents", "INT8": "int_contents", "BOOL": "bool_contents", "BYTES": "bytes_contents"}


WIRE_OF = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.int8): "INT8",
           np.dtype(np.bool_): "BOOL", np.dtype(np.object_): "BYTES"}


def raw_bytes(item: InputPlan) -> bytes:
    """The raw/binary form of an input, with the plan's damage applied (a JSON count change included)."""
    array = item.array
    if item.json_count_delta:
        values = json_values(item)
        array = np.empty(len(values), dtype=np.object_) if array.dtype == np.object_ else np.array(values, array.dtype)
        if array.dtype == np.object_:
            array[:] = [v.encode() for v in values]
    if array.dtype == np.object_:
        parts = [struct.pack("<I", len(v)) + v for v in array.reshape(-1)]
        data = b"".join(parts)
        if item.bad_prefix:
            data = struct.pack("<I", len(data) + 1) + data[4:] if data else struct.pack("<I", 1)
    else:
        data = np.ascontiguousarray(array).tobytes()
    data = data[: len(data) - item.drop_bytes] if item.drop_bytes else data
    return data + item.extra_bytes


def json_values(item: InputPlan) -> list[Any]:
    """The flat JSON/typed values of an input, with elements removed or added as the plan says."""
    flat = item.array.reshape(-1)
    values = [v.decode() for v in flat] if item.array.dtype == np.object_ else flat.tolist()
    if item.json_count_delta < 0:
        return values[: max(0, len(values) + item.json_count_delta)] if values else values[:0]
    filler = values[0] if values else ("a" if item.array.dtype == np.object_ else 0)
    return values + [filler] * item.json_count_delta


# ---- gRPC --------------------------------------------------------------------------------------------


def grpc_request(plan: Plan) -> pb.ModelInferRequest:
    """Typed contents when every input asks for it (gRPC has no per-input choice), else raw for all."""
    request = pb.ModelInferRequest(model_name=plan.model, model_version=plan.version, id=plan.request_id)
    typed = bool(plan.inputs) and all(
        i.as_json and i.datatype in TYPED_FIELD and i.datatype == WIRE_OF[i.array.dtype] for i in plan.inputs
    )
    for item in plan.inputs:
        tensor = request.inputs.add(name=item.name, datatype=item.datatype, shape=list(item.shape))
        if typed:
            values = json_values(item)
            field = TYPED_FIELD[item.datatype]
            getattr(tensor.contents, field).extend([v.encode() for v in values] if field == "bytes_contents" else values)
        else:
            request.raw_input_contents.append(raw_bytes(item))
    for name in plan.outputs:
        request.outputs.add(name=name)
    for key, value in plan.parameters.items():
        param = request.parameters[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = value
    return request


@dataclass(frozen=True)
class Answer:
    """What the server said, transport-neutral: `code` is "OK", a gRPC status name, or an HTTP status."""

    code: str
    message: str
    outputs: Arrays | None = None


def grpc_call(channel: grpc.Channel, payload: bytes) -> Answer:
    call = channel.unary_unary(INFER_METHOD)  # no serializers: bytes in, bytes out
    try:
        reply = call(payload, timeout=TIMEOUT_S)
    except grpc.RpcError as exc:
        return Answer(exc.code().name, exc.details() or "")
    return Answer("OK", "", grpc_outputs(pb.ModelInferResponse.FromString(reply)))


def grpc_outputs(response: pb.ModelInferResponse) -> Arrays:
    out: Arrays = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        out[tensor.name] = decode_raw(tensor.datatype, tuple(tensor.shape), raw)
    return out


def decode_raw(datatype: str, shape: tuple[int, ...], raw: bytes) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            (length,) = struct.unpack_from("<I", raw, offset)
            items.append(raw[offset + 4 : offset + 4 + length])
            offset += 4 + length
        array = np.empty(len(items), dtype=np.object_)
        array[:] = items
        return array.reshape(shape)
    dtype = {"FP32": np.float32, "FP16": np.float16, "INT8": np.int8, "BOOL": np.bool_}[datatype]
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


# ---- HTTP --------------------------------------------------------------------------------------------


def http_body(plan: Plan) -> tuple[bytes, int | None]:
    """(body, Inference-Header-Content-Length or None when there is no binary part)."""
    inputs: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for item in plan.inputs:
        entry: dict[str, Any] = {"name": item.name, "datatype": item.datatype, "shape": list(item.shape)}
        if item.as_json:
            entry["data"] = json_values(item)
        else:
            raw = raw_bytes(item)
            entry["parameters"] = {"binary_data_size": len(raw) - len(item.extra_bytes)}  # extra bytes: unclaimed
            chunks.append(raw)
        inputs.append(entry)
    header: dict[str, Any] = {"inputs": inputs}
    if plan.request_id:
        header["id"] = plan.request_id
    params: dict[str, Any] = dict(plan.parameters)
    if plan.binary_outputs:
        params["binary_data_output"] = True
    if params:
        header["parameters"] = params
    if plan.outputs:
        header["outputs"] = [{"name": n} for n in plan.outputs]
    head = json.dumps(header).encode()
    return (head + b"".join(chunks), len(head)) if chunks else (head, None)


def http_post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def infer_path(model: str, version: str = "") -> str:
    quoted = urllib.parse.quote(model, safe="")
    return f"/v2/models/{quoted}/versions/{urllib.parse.quote(version, safe='')}/infer" if version else f"/v2/models/{quoted}/infer"


def http_answer(status: int, headers: dict[str, str], body: bytes) -> Answer:
    """Parse a reply; an OK body must be standard JSON (no NaN/Infinity) with well-formed outputs."""
    length = int(headers.get("inference-header-content-length", len(body)))
    header = json.loads(body[:length], parse_constant=_refuse_constant)
    if status != 200:
        return Answer(str(status), str(header.get("error", "")) if isinstance(header, dict) else "")
    out: Arrays = {}
    offset = length
    for item in header["outputs"]:
        shape = tuple(item["shape"])
        size = item.get("parameters", {}).get("binary_data_size")
        if size is None:
            data = item["data"]
            dtype = np.object_ if item["datatype"] == "BYTES" else None
            values = [v.encode() for v in data] if item["datatype"] == "BYTES" else data
            out[item["name"]] = np.array(values, dtype=dtype).reshape(shape)
        else:
            out[item["name"]] = decode_raw(item["datatype"], shape, body[offset : offset + size])
            offset += size
    return Answer("OK", "", out)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"the server wrote the non-standard JSON constant {name}")


def http_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()
