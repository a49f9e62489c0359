"""Tensors in shared memory: the `shared_memory_*` parameters of an input or requested output, reading an input
from its region, writing an output into one. Triton's checks and messages (grpc/infer_handler.cc,
shared_memory_manager.cc, the core's input byte size check).

Nothing is allocated from what a request declares: an input is a view of the registered bytes (a numeric
tensor) or is parsed from them (BYTES), and its byte size must equal what the declared shape needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ensemble_runtime import dtypes
from ensemble_runtime.errors import internal, invalid, quote_name
from ensemble_runtime.inference import ParamValue, Tensor
from ensemble_runtime.shared_memory.regions import SharedMemoryRegistry

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"


@dataclass(frozen=True, slots=True)
class ShmRef:
    """Where a tensor's bytes are: `byte_size` bytes at `offset` of region `region`."""

    region: str
    offset: int
    byte_size: int


def _integer(tensor: str, key: str, value: ParamValue) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid(f"invalid value type for '{key}' parameter for tensor {quote_name(tensor)}, expected int64_param.")
    if value < 0:
        raise invalid(f"'{key}' parameter for tensor {quote_name(tensor)} must not be negative, got {value}")
    return value


def parse_ref(tensor: str, params: Mapping[str, ParamValue]) -> ShmRef | None:
    """The shared memory a tensor's parameters name, or None when they name none."""
    region = params.get(REGION)
    if region is None:
        for key in (OFFSET, BYTE_SIZE):
            if key in params:
                raise invalid(f"'{key}' can not be specified without '{REGION}' parameter for tensor {quote_name(tensor)}")
        return None
    if not isinstance(region, str):
        raise invalid(f"invalid value type for '{REGION}' parameter for tensor {quote_name(tensor)}, expected string_param.")
    if BYTE_SIZE not in params:
        raise invalid(f"'{BYTE_SIZE}' must be specified along with '{REGION}' parameter for tensor {quote_name(tensor)}")
    offset = _integer(tensor, OFFSET, params[OFFSET]) if OFFSET in params else 0
    return ShmRef(region, offset, _integer(tensor, BYTE_SIZE, params[BYTE_SIZE]))


def read_input(
    registry: SharedMemoryRegistry, ref: ShmRef, name: str, wire: str, shape: tuple[int, ...], model: str
) -> Tensor:
    """Input `name` from shared memory: a read-only view of the region's bytes (numeric), or parsed (BYTES)."""
    window = registry.window(ref.region, ref.offset, ref.byte_size)
    count = dtypes.element_count(name, shape, wire)
    if wire == "BYTES":
        return dtypes.deserialize_bytes(window.read(), count, name).reshape(shape)
    expected = count * dtypes.element_size(wire)
    if ref.byte_size != expected:
        raise invalid(
            f"input byte size mismatch for input {quote_name(name)} for model {quote_name(model)}. "
            f"Expected {expected}, got {ref.byte_size}"
        )
    return np.frombuffer(window.read(), dtype=dtypes.wire_to_numpy(wire)).reshape(shape)


def check_output(registry: SharedMemoryRegistry, ref: ShmRef) -> None:
    """Before inference: the region exists and the window is inside it (as Triton checks up front)."""
    registry.window(ref.region, ref.offset, ref.byte_size)


def _bytes_of(array: Tensor) -> memoryview:
    contiguous = np.ascontiguousarray(array)
    return contiguous.reshape(-1).view(np.uint8).data


def write_output(registry: SharedMemoryRegistry, ref: ShmRef, name: str, array: Tensor) -> None:
    """Output `name` into its region; INTERNAL (Triton's code) when the window is too small for it."""
    window = registry.window(ref.region, ref.offset, ref.byte_size)
    wire = dtypes.numpy_to_wire(array.dtype)
    data = memoryview(dtypes.serialize_bytes(array)) if wire == "BYTES" else _bytes_of(array)
    if data.nbytes > ref.byte_size:
        raise internal(
            f"shared memory size specified with the request for output {quote_name(name)} ({ref.byte_size} bytes) "
            f"should be at least {data.nbytes} bytes to hold the results"
        )
    window.write(data)


def sends_to_shared_memory(output_parameters: Mapping[str, Mapping[str, ParamValue]]) -> bool:
    """Whether any requested output goes to shared memory (one `output_refs` would list; parameters already
    checked), without parsing where. (A loop, not `any` over a generator: two calls fewer per request.)"""
    for params in output_parameters.values():  # noqa: SIM110 (as said above)
        if REGION in params:
            return True
    return False


def output_refs(output_parameters: Mapping[str, Mapping[str, ParamValue]]) -> dict[str, ShmRef]:
    """Requested output -> the shared memory it goes to, for those that name one (parameters already checked)."""
    refs = {name: parse_ref(name, params) for name, params in output_parameters.items()}
    return {name: ref for name, ref in refs.items() if ref is not None}
