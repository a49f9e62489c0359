"""Protobuf <-> data plane types for the gRPC transport. Pure; no grpc import.

`decode_request` reads a protobuf `ModelInferRequest` or the native core's view of one
(`ensemble_runtime.protocol._native.InferRequestView`: the same attributes, parameters as plain values, raw contents as
buffers numpy reads in place); `decode_view` reads the view without the structural walk where the core found the
request plain; `output_payloads` is what both transports send for each output."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from ensemble_runtime.dtypes import (
    element_count,
    numpy_to_wire,
    serialize_bytes,
    tensor_from_raw,
    wire_to_numpy,
)
from ensemble_runtime.errors import NAME_LIMIT, bounded, invalid, quote_name
from ensemble_runtime.inference import InferRequest, InferResponse, ParamValue, Tensor
from ensemble_runtime.log_settings import LogSettings
from ensemble_runtime.shared_memory import (
    SharedMemoryRegistry,
    ShmRef,
    check_output,
    parse_ref,
    read_input,
    write_output,
)
from ensemble_runtime.stats import Duration, ModelStats
from ensemble_runtime.validation import ModelSignature

if TYPE_CHECKING:
    from ensemble_runtime.protocol._native import InferRequestView

_TYPED_FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _param(value: pb.InferParameter) -> ParamValue:
    kind = value.WhichOneof("parameter_choice")
    return getattr(value, kind) if kind else ""


def _params(parameters: Any) -> dict[str, ParamValue]:
    """A protobuf parameter map as a dict; an empty one without walking it (the common case). The native
    core's parameters are a dict of plain values already."""
    if isinstance(parameters, dict):
        return parameters
    return {k: _param(v) for k, v in parameters.items()} if parameters else {}


def _set_param(target: pb.InferParameter, value: ParamValue) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def _shape(tensor: pb.ModelInferRequest.InferInputTensor) -> tuple[tuple[int, ...], int]:
    """The declared shape and its element count, checked without allocating anything."""
    shape = tuple(tensor.shape)  # protobuf int64 fields are Python ints already
    return shape, element_count(tensor.name, shape, tensor.datatype)


def _from_typed(tensor: pb.ModelInferRequest.InferInputTensor) -> Tensor:
    shape, count = _shape(tensor)
    field = _TYPED_FIELDS.get(tensor.datatype)
    if field is None:
        raise invalid(f"input {quote_name(tensor.name)}: datatype '{tensor.datatype}' must be sent as raw contents")
    values: Any = getattr(tensor.contents, field)
    if len(values) != count:
        raise invalid(
            f"unexpected number of elements {len(values)} for input {quote_name(tensor.name)}, expecting {count} "
            f"for shape {bounded(str(list(shape)), NAME_LIMIT)}"
        )
    if tensor.datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = list(values)
        return array.reshape(shape)
    return np.asarray(values, dtype=wire_to_numpy(tensor.datatype)).reshape(shape)


def _shm_ref(kind: str, name: str, parameters: Any, shm: SharedMemoryRegistry | None) -> ShmRef | None:
    """The shared memory a tensor's `shared_memory_*` parameters name (None: none); refused without a registry."""
    if not parameters:  # most tensors carry no parameters: skip the map walk
        return None
    params = {key: value for key, value in _params(parameters).items() if key.startswith("shared_memory_")}
    if not params:
        return None
    if shm is None:
        raise invalid(f"{kind} {quote_name(name)}: shared memory is not supported by this runtime")
    return parse_ref(name, params)


def decode_request(
    request: pb.ModelInferRequest | InferRequestView, shm: SharedMemoryRegistry | None = None
) -> tuple[InferRequest, dict[str, str]]:
    """ModelInferRequest -> (InferRequest, datatype each input declared). Inputs in shared memory are read from
    `shm` (raw contents then belong, in order, to the other inputs); outputs sent there are checked up front."""
    raw = request.raw_input_contents
    for tensor in request.inputs if raw else ():
        if tensor.HasField("contents"):  # Triton's message, which clients check
            raise invalid(
                f"contents field must not be specified when using raw_input_contents for {quote_name(tensor.name)} "
                f"for model {quote_name(request.model_name)}"
            )
    refs = [_shm_ref("input", tensor.name, tensor.parameters, shm) for tensor in request.inputs]
    plain = sum(1 for ref in refs if ref is None)
    if raw and len(raw) != plain:
        raise invalid(f"expected {plain} raw input contents (one per input) but got {len(raw)}")
    inputs: dict[str, Tensor] = {}
    declared: dict[str, str] = {}
    raw_index = 0
    for tensor, ref in zip(request.inputs, refs, strict=True):
        if tensor.name in inputs:
            raise invalid(f"input {quote_name(tensor.name)} is given more than once")
        if tensor.datatype not in _TYPED_FIELDS and tensor.datatype not in ("FP16", "BF16"):
            raise invalid(f"input {quote_name(tensor.name)} has unknown datatype {quote_name(tensor.datatype)}")
        if tensor.datatype == "BF16":
            raise invalid(f"input {quote_name(tensor.name)}: datatype BF16 is not supported by this runtime")
        if ref is not None and shm is not None:
            if tensor.HasField("contents"):
                raise invalid(
                    f"unexpected 'content' provided when using shared memory for input tensor {quote_name(tensor.name)} "
                    f"for model {quote_name(request.model_name)}"
                )
            shape = tuple(int(d) for d in tensor.shape)
            inputs[tensor.name] = read_input(shm, ref, tensor.name, tensor.datatype, shape, request.model_name)
        elif raw:
            inputs[tensor.name] = tensor_from_raw(tensor.name, tensor.datatype, tuple(tensor.shape), raw[raw_index])
            raw_index += 1
        else:
            inputs[tensor.name] = _from_typed(tensor)
        declared[tensor.name] = tensor.datatype
    outputs: list[str] = []
    output_params: dict[str, dict[str, ParamValue]] = {}
    for output in request.outputs:
        if output.name in output_params:
            raise invalid(f"output {quote_name(output.name)} is requested more than once")
        out_ref = _shm_ref("output", output.name, output.parameters, shm)
        if out_ref is not None and shm is not None:
            check_output(shm, out_ref)
        outputs.append(output.name)
        output_params[output.name] = _params(output.parameters)
    return (
        InferRequest(
            model_name=request.model_name,
            model_version=request.model_version,
            inputs=inputs,
            requested_outputs=outputs,
            id=request.id,
            parameters=_params(request.parameters),
            output_parameters=output_params,
        ),
        declared,
    )


def decode_view(view: InferRequestView, shm: SharedMemoryRegistry | None = None) -> tuple[InferRequest, dict[str, str]]:
    """The native core's view of a request, as `decode_request` reads it. Where the core found it plain
    (`view.plain`: each input in raw contents, no shared memory or typed contents, names unique, datatypes
    known), every structural check has passed already, and the request is built from the core's tensors with
    only the checks of each tensor against its bytes, in the same order; where those pass too for every input
    (fixed-size datatypes, bytes that fit the shape), the core built the arrays already (`view.arrays`)."""
    inputs = view.arrays
    declared = view.declared
    if inputs is None or declared is None:  # some tensor's checks against its bytes are Python's to make
        plain = view.plain
        if plain is None:
            return decode_request(view, shm)
        inputs, declared = {}, {}
        for name, wire, shape, data in plain:
            inputs[name] = tensor_from_raw(name, wire, shape, data)
            declared[name] = wire
    output_params = view.output_parameters
    request = InferRequest(
        view.model_name, view.model_version, inputs, list(output_params), view.id, view.parameters, output_params
    )
    return request, declared


OutputPayload = tuple[str, str, tuple[int, ...], "bytes | npt.NDArray[np.uint8]"]


def output_payloads(
    response: InferResponse, shm: SharedMemoryRegistry | None = None, shm_outputs: dict[str, ShmRef] | None = None
) -> list[OutputPayload]:
    """(name, datatype, shape, contents) per output: contents serialized (BYTES) or the array's bytes as a
    contiguous uint8 view (no copy when the array is contiguous already). Outputs in `shm_outputs` are written
    to their regions and sent with empty contents (Triton)."""
    out: list[OutputPayload] = []
    refs = shm_outputs or {}
    for name, array in response.outputs.items():
        wire = numpy_to_wire(array.dtype)
        ref = refs.get(name)
        data: bytes | npt.NDArray[np.uint8]
        if ref is not None and shm is not None:
            write_output(shm, ref, name, array)
            data = b""
        elif wire == "BYTES":
            data = serialize_bytes(array)
        else:
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        out.append((name, wire, tuple(array.shape), data))
    return out


def encode_response(
    response: InferResponse, shm: SharedMemoryRegistry | None = None, shm_outputs: dict[str, ShmRef] | None = None
) -> pb.ModelInferResponse:
    """The response as a protobuf message (see `output_payloads`)."""
    out = pb.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    for key, value in response.parameters.items():
        _set_param(out.parameters[key], value)
    raw = out.raw_output_contents
    for name, wire, shape, data in output_payloads(response, shm, shm_outputs):
        out.outputs.add(name=name, datatype=wire, shape=shape)
        raw.append(data if isinstance(data, bytes) else data.tobytes())
    return out


def _io_metadata(sig: ModelSignature, outputs: bool) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    specs = sig.outputs if outputs else sig.inputs
    return [
        pb.ModelMetadataResponse.TensorMetadata(name=s.name, datatype=s.wire_type, shape=sig.full_dims(s))
        for s in specs.values()
    ]


def model_metadata(sig: ModelSignature, config: mc.ModelConfig, versions: list[str]) -> pb.ModelMetadataResponse:
    return pb.ModelMetadataResponse(
        name=config.name,
        versions=versions,
        platform=config.platform or config.backend,
        inputs=_io_metadata(sig, outputs=False),
        outputs=_io_metadata(sig, outputs=True),
    )


def _duration(target: pb.StatisticDuration, source: Duration) -> None:
    target.count = source.count
    target.ns = source.ns


def model_statistics(name: str, version: int, stats: ModelStats) -> pb.ModelStatistics:
    out = pb.ModelStatistics(
        name=name,
        version=str(version),
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
    )
    infer = out.inference_stats
    for field_name in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit",
                       "cache_miss"):
        _duration(getattr(infer, field_name), getattr(stats, field_name))
        getattr(infer, field_name).SetInParent()  # present even when empty, as Triton sends them
    for size, batch in sorted(stats.batches.items()):
        entry = out.batch_stats.add(batch_size=size)
        _duration(entry.compute_input, batch.compute_input)
        _duration(entry.compute_infer, batch.compute_infer)
        _duration(entry.compute_output, batch.compute_output)
    return out


def log_setting_values(request: pb.LogSettingsRequest) -> dict[str, object]:
    """A LogSettings request's settings as values (None for one sent without a value)."""
    values: dict[str, object] = {}
    for name, setting in request.settings.items():
        which = setting.WhichOneof("parameter_choice")
        values[name] = None if which is None else getattr(setting, which)
    return values


def log_settings_response(settings: LogSettings) -> pb.LogSettingsResponse:
    response = pb.LogSettingsResponse()
    for name, value in settings.as_dict().items():
        if isinstance(value, bool):
            response.settings[name].bool_param = value
        elif isinstance(value, int):
            response.settings[name].uint32_param = value
        else:
            response.settings[name].string_param = value
    return response
