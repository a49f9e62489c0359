"""KServe v2 / Triton HTTP bodies <-> data plane types: JSON tensors and the binary tensor extension. Pure.

A request body is a JSON header, optionally followed by raw tensor bytes; `Inference-Header-Content-Length`
gives the header's length and each binary input its `binary_data_size`. Every error is an `invalid(...)`
that names the tensor or field at fault, so the transport answers 400 and never 500 for bad input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

from ensemble_runtime import dtypes
from ensemble_runtime.errors import NAME_LIMIT, bounded, invalid, quote_name
from ensemble_runtime.inference import InferRequest, InferResponse, ParamValue, Tensor
from ensemble_runtime.shared_memory import (
    SharedMemoryRegistry,
    ShmRef,
    check_output,
    output_refs,
    parse_ref,
    read_input,
    sends_to_shared_memory,
    write_output,
)

HEADER_LENGTH = "Inference-Header-Content-Length"
JSON_CONTENT = "application/json"
BINARY_CONTENT = "application/octet-stream"

_INTS = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})
_FLOATS = frozenset({"FP16", "FP32", "FP64"})
_DATATYPES = dtypes.WIRE_TYPES - {"BF16"}  # numpy has no bfloat16
_PARAMETER_TYPES = (int, float, str)
Chunk = bytes | npt.NDArray[np.uint8]  # a binary output: serialized BYTES, or an array's bytes as a uint8 view


@dataclass(frozen=True, slots=True)
class DecodedInfer:
    """An inference request off the wire, plus how the client wants each output encoded."""

    request: InferRequest
    declared: dict[str, str]  # input name -> datatype given on the wire
    binary_default: bool = False  # request parameter `binary_data_output`

    def binary(self, name: str) -> bool:
        """Whether output `name` goes back as binary data: its `binary_data`, else `binary_data_output`."""
        return bool(self.request.output_parameters.get(name, {}).get("binary_data", self.binary_default))


def dumps(obj: object) -> bytes:
    """Standard JSON (RFC 8259): ASCII, so safe for any str, even lone surrogates; never NaN or Infinity."""
    return _ENCODER.encode(obj).encode()


def error_body(message: str) -> bytes:
    return dumps({"error": message})


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value (send non-finite numbers as binary data)")


# Built once: `json.dumps` / `json.loads` with options build a new encoder / decoder (and scanner) per call.
# Neither keeps anything between calls.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_json(raw: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    """A JSON object from a request body; an empty body is an empty object.

    Standard JSON only: NaN and Infinity are refused, and so is any number too large for a double (rapidjson,
    which Triton uses, calls that "Number too big"); too deep a nesting is a 400 as any other malformed body."""
    if not len(raw):
        return {}
    data = bytes(raw)
    try:  # what json.loads does with bytes: UTF-8, -16 or -32 as their first bytes tell
        value = _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise invalid(f"malformed JSON in {what}: {exc}") from None
    except RecursionError:
        raise invalid(f"malformed JSON in {what}: nested too deeply") from None
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def json_parameters(raw: object, kind: str, name: str = "") -> dict[str, ParamValue]:
    """The `parameters` object of the request (`kind` "the request") or of an input or output `name`."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid(f"'parameters' of {_where(kind, name)} must be a JSON object")
    for key, value in raw.items():
        if not isinstance(value, _PARAMETER_TYPES):  # bool is an int
            raise invalid(f"parameter {quote_name(key)} of {_where(kind, name)} must be a string, number or boolean")
        if isinstance(value, float) and not math.isfinite(value):
            raise invalid(f"parameter {quote_name(key)} of {_where(kind, name)}: number too big for a double")
    return dict(raw)


def _where(kind: str, name: str) -> str:
    return f"{kind} {quote_name(name)}" if name else kind


def _shape(name: str, raw: object) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
        raise invalid(f"input {quote_name(name)}: 'shape' must be a list of integers, got {bounded(repr(raw), NAME_LIMIT)}")
    return tuple(raw)


def _flatten(data: list[Any]) -> list[Any]:
    """The leaves of nested lists in row-major order; iterative, so any nesting depth is fine."""
    leaves: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            leaves.append(item)
        else:
            stack.pop()
    return leaves


def _numbers(name: str, wire: str, data: list[Any]) -> np.ndarray[Any, Any]:
    """Flat array of the JSON values in `data` (nested rows, or ragged: numpy's fast path first), checked."""
    try:
        array = np.asarray(data)
    except (ValueError, OverflowError):
        array = np.asarray(_flatten(data))
    kinds, what = ("b", "booleans") if wire == "BOOL" else ("iu", "integers") if wire in _INTS else ("iuf", "numbers")
    exact = False  # integers numpy would turn into floats or objects (past int64, mixed signs)
    if wire in _INTS and array.dtype.kind not in "iu":
        values = _flatten(data)
        exact = all(type(v) is int for v in values)
        array = np.array(values, dtype=np.object_) if exact else array
    if array.size and array.dtype.kind not in kinds and not exact:
        raise invalid(f"input {quote_name(name)}: 'data' must hold only {what} for datatype {wire}")
    if wire in _INTS and array.size:
        info = np.iinfo(wire.lower())
        if array.min() < info.min or array.max() > info.max:
            raise invalid(f"input {quote_name(name)}: a value in 'data' is out of range for datatype {wire}")
    if wire in _FLOATS:
        with np.errstate(over="ignore"):
            array = array.astype(dtypes.wire_to_numpy(wire))
        if not np.isfinite(array).all():  # NaN/Infinity never parse: this is 1e400, or 1e300 for FP32
            raise invalid(f"input {quote_name(name)}: a value in 'data' is out of range for datatype {wire}")
    return array.reshape(-1)


def tensor_from_json(name: str, wire: str, shape: tuple[int, ...], data: object) -> Tensor:
    """A JSON `data` array (flat or nested, row-major) -> array of `shape`."""
    if not isinstance(data, list):
        raise invalid(f"input {quote_name(name)}: 'data' must be a JSON array")
    count = dtypes.element_count(name, shape, wire)
    if wire == "BYTES":
        strings = _flatten(data)
        if not all(isinstance(v, str) for v in strings):
            raise invalid(f"input {quote_name(name)}: 'data' must hold only strings for datatype BYTES")
        array = np.empty(len(strings), dtype=np.object_)
        try:
            array[:] = [v.encode() for v in strings]
        except UnicodeEncodeError:
            raise invalid(f"input {quote_name(name)}: a string in 'data' is not valid Unicode") from None
    else:
        array = _numbers(name, wire, data)
    if array.size != count:
        raise invalid(
            f"unexpected number of elements {array.size} in 'data' for input {quote_name(name)}, "
            f"expecting {count} for shape {bounded(str(list(shape)), NAME_LIMIT)}"
        )
    return array.astype(dtypes.wire_to_numpy(wire), copy=False).reshape(shape)


def _header_length(value: str | None, body_length: int) -> int:
    if value is None:
        return body_length
    try:
        length = int(value)
    except ValueError:
        raise invalid(f"{HEADER_LENGTH} must be an integer, got {quote_name(value)}") from None
    if length < 0 or length > body_length:
        raise invalid(f"{HEADER_LENGTH} is {length} but the request body has {body_length} bytes")
    return length


def _shm_ref(kind: str, name: str, params: dict[str, ParamValue], shm: SharedMemoryRegistry | None) -> ShmRef | None:
    """The shared memory a tensor's `shared_memory_*` parameters name (None: none); refused without a registry."""
    for key in params:
        if key.startswith("shared_memory_"):
            break
    else:
        return None
    if shm is None:
        raise invalid(f"{kind} {quote_name(name)}: shared memory is not supported by this runtime")
    return parse_ref(name, params)


def _input_tensor(
    item: object, index: int, binary: memoryview, offset: int, shm: SharedMemoryRegistry | None = None, model: str = ""
) -> tuple[str, str, Tensor, int]:
    """One entry of `inputs` -> (name, datatype, array, bytes of binary data it used)."""
    if not isinstance(item, dict):
        raise invalid(f"inputs[{index}] must be a JSON object")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(f"inputs[{index}] has no 'name'")
    wire = item.get("datatype")
    if not isinstance(wire, str) or wire not in _DATATYPES:
        raise invalid(f"input {quote_name(name)} has unknown or unsupported datatype {quote_name(str(wire))}")
    shape = _shape(name, item.get("shape"))
    params = json_parameters(item.get("parameters"), "input", name)
    ref = _shm_ref("input", name, params, shm)
    if ref is not None and shm is not None:
        if "data" in item or "binary_data_size" in params:
            raise invalid(f"input {quote_name(name)} has data in the request and in shared memory; give one")
        return name, wire, read_input(shm, ref, name, wire, shape, model), 0
    size = params.get("binary_data_size")
    if size is None:
        if "data" not in item:
            raise invalid(f"input {quote_name(name)} has neither 'data' nor a 'binary_data_size' parameter")
        return name, wire, tensor_from_json(name, wire, shape, item["data"]), 0
    if "data" in item:
        raise invalid(f"input {quote_name(name)} has both 'data' and a 'binary_data_size' parameter")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise invalid(f"input {quote_name(name)}: 'binary_data_size' must be a non-negative integer, got {size!r}")
    if offset + size > len(binary):
        raise invalid(
            f"input {quote_name(name)}: binary_data_size {size} runs past the end of the request body "
            f"({len(binary) - offset} bytes of binary data left)"
        )
    return name, wire, dtypes.tensor_from_raw(name, wire, shape, binary[offset : offset + size]), size


def _outputs(raw: object, shm: SharedMemoryRegistry | None = None) -> dict[str, dict[str, ParamValue]]:
    """The requested outputs, in order, with their parameters (those sent to shared memory checked up front)."""
    if not isinstance(raw, list | None):
        raise invalid("'outputs' must be a JSON array")
    requested: dict[str, dict[str, ParamValue]] = {}
    for index, item in enumerate(raw or []):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise invalid(f"outputs[{index}] has no 'name'")
        if name in requested:
            raise invalid(f"output {quote_name(name)} is requested more than once")
        params = requested[name] = json_parameters(item.get("parameters"), "output", name)
        ref = _shm_ref("output", name, params, shm)
        if ref is not None and shm is not None:
            check_output(shm, ref)
        if not isinstance(params.get("binary_data", False), bool):
            raise invalid(f"output {quote_name(name)}: 'binary_data' must be a boolean")
    return requested


def decode_infer_request(
    body: Buffer, header_length: str | None, model: str, version: str = "",
    shm: SharedMemoryRegistry | None = None,
) -> DecodedInfer:
    """An infer request body (JSON header plus binary tensors) -> what the data plane takes."""
    view = memoryview(body).toreadonly()  # tensors are views of the body: no model edits it in place
    length = _header_length(header_length, view.nbytes)
    header = parse_json(view[:length], "the inference request")
    binary = view[length:]
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise invalid("request 'id' must be a string")
    parameters = json_parameters(header.get("parameters"), "the request")
    binary_default = parameters.pop("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise invalid("request parameter 'binary_data_output' must be a boolean")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise invalid("the inference request has no 'inputs' array")
    inputs: dict[str, Tensor] = {}
    declared: dict[str, str] = {}
    offset = 0
    for index, item in enumerate(raw_inputs):
        name, wire, array, used = _input_tensor(item, index, binary, offset, shm, model)
        if name in inputs:
            raise invalid(f"input {quote_name(name)} is given more than once")
        inputs[name], declared[name] = array, wire
        offset += used
    if offset != len(binary):
        raise invalid(
            f"the request body has {len(binary) - offset} bytes of binary data that no input claims "
            f"(inputs declare {offset} of {len(binary)} bytes through 'binary_data_size')"
        )
    outputs = _outputs(header.get("outputs"), shm)
    request = InferRequest(model, version, inputs, list(outputs), request_id, parameters, outputs)
    return DecodedInfer(request, declared, binary_default)


def json_data(name: str, wire: str, array: Tensor, remedy: str = "request it with 'binary_data': true") -> list[Any]:
    """An output's values as JSON values, flat (row-major); `remedy` ends the message of a refusal."""
    flat = array.reshape(-1)
    if wire in _FLOATS and not np.isfinite(flat).all():
        raise invalid(f"output {quote_name(name)} holds NaN or infinity, which JSON cannot carry; {remedy}")
    if wire != "BYTES":
        return list(flat.tolist())
    try:
        return [item if isinstance(item, str) else bytes(item).decode() for item in flat]
    except UnicodeDecodeError:
        raise invalid(f"output {quote_name(name)} holds bytes that are not UTF-8 text; {remedy}") from None


def _chunk(wire: str, array: Tensor) -> Chunk:
    """An output's binary data: serialized BYTES, or the array's bytes as a uint8 view (no copy when contiguous)."""
    return dtypes.serialize_bytes(array) if wire == "BYTES" else np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def encode_infer_parts(
    response: InferResponse, decoded: DecodedInfer, shm: SharedMemoryRegistry | None = None
) -> tuple[bytes, list[Chunk]]:
    """-> (the JSON header, the binary outputs that follow it, in order: serialized BYTES, or the array's
    bytes as a contiguous uint8 view, no copy when the array is contiguous already). Outputs requested in
    shared memory are written there and listed without data, as Triton does."""
    outputs: list[dict[str, Any]] = []
    chunks: list[Chunk] = []
    in_shm = output_refs(decoded.request.output_parameters) if shm is not None else {}
    for name, array in response.outputs.items():
        wire = dtypes.numpy_to_wire(array.dtype)
        entry: dict[str, Any] = {"name": name, "datatype": wire, "shape": [int(d) for d in array.shape]}
        if shm is not None and name in in_shm:
            write_output(shm, in_shm[name], name, array)
        elif decoded.binary(name):
            raw = _chunk(wire, array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = json_data(name, wire, array)
        outputs.append(entry)
    header: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        header["id"] = response.id
    if response.parameters:
        header["parameters"] = dict(response.parameters)
    header["outputs"] = outputs
    return dumps(header), chunks


BinaryOutput = tuple[str, str, tuple[int, ...], Chunk]  # name, datatype, shape, its binary data


def all_binary(response: InferResponse, decoded: DecodedInfer) -> bool:
    """Whether every output (there is one at least) goes back as binary data after the JSON header: none as
    JSON, none in shared memory."""
    return json_outputs(response, decoded) == ()


def json_outputs(response: InferResponse, decoded: DecodedInfer) -> tuple[str, ...] | None:
    """The outputs that go back as JSON `data` in the header, the others as binary data after it, where none
    goes to shared memory and there is one at least (what the core writes: `HttpCall.reply_response`); else
    None."""
    asked = decoded.request.output_parameters
    if not response.outputs or (asked and sends_to_shared_memory(asked)):
        return None
    return tuple([name for name in response.outputs if not decoded.binary(name)])


def binary_outputs(response: InferResponse, decoded: DecodedInfer) -> list[BinaryOutput] | None:
    """Every output as (name, datatype, shape, binary data), in order, when all of them go back as binary data
    after the JSON header (none as JSON, none in shared memory); None otherwise. The data is what
    `encode_infer_parts` appends."""
    if not all_binary(response, decoded):
        return None
    outputs: list[BinaryOutput] = []
    for name, array in response.outputs.items():
        wire = dtypes.numpy_to_wire(array.dtype)
        outputs.append((name, wire, array.shape, _chunk(wire, array)))
    return outputs


def encode_infer_response(
    response: InferResponse, decoded: DecodedInfer, shm: SharedMemoryRegistry | None = None
) -> tuple[bytes, int | None]:
    """-> (body, JSON header length when binary outputs follow the header, else None)."""
    head, chunks = encode_infer_parts(response, decoded, shm)
    if not chunks:
        return head, None
    return b"".join([head, *(c if isinstance(c, bytes) else c.tobytes() for c in chunks)]), len(head)
