"""Triton data types: config enum names, wire names, numpy dtypes, and BYTES (de)serialisation."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

from ensemble_runtime.errors import NAME_LIMIT, bounded, invalid, quote_name

MAX_DIMS = 32  # dimensions a tensor may declare (numpy's limit on some versions; no model needs more)
_MAX_ELEMENTS_BYTES = 2**63 - 1  # numpy's largest array, in bytes, even with a zero dimension

# wire name -> numpy dtype (BYTES is an object array of bytes)
_WIRE_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
_NUMPY_TO_WIRE: dict[np.dtype[Any], str] = {v: k for k, v in _WIRE_TO_NUMPY.items() if k != "BYTES"}

WIRE_TYPES: frozenset[str] = frozenset(_WIRE_TO_NUMPY) | {"BF16"}
# wire name -> bytes per element (0: BYTES, variable); BF16 has no numpy dtype but a size
_ELEMENT_SIZE: dict[str, int] = {k: (0 if k == "BYTES" else v.itemsize) for k, v in _WIRE_TO_NUMPY.items()} | {"BF16": 2}


def config_to_wire(config_type_name: str) -> str:
    """`TYPE_FP32` -> `FP32`; `TYPE_STRING` -> `BYTES` (Triton's naming)."""
    name = config_type_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def wire_to_config(wire: str) -> str:
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


def wire_to_numpy(wire: str) -> np.dtype[Any]:
    try:
        return _WIRE_TO_NUMPY[wire]
    except KeyError:
        raise invalid(f"unsupported datatype '{wire}'") from None


def numpy_to_wire(dtype: np.dtype[Any]) -> str:
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _NUMPY_TO_WIRE[np.dtype(dtype)]
    except KeyError:
        raise invalid(f"numpy dtype {dtype} has no Triton equivalent") from None


def element_size(wire: str) -> int:
    """Bytes per element of a fixed-size type; 0 for BYTES."""
    size = _ELEMENT_SIZE.get(wire)
    if size is None:
        raise invalid(f"unsupported datatype '{wire}'")
    return size


def element_count(name: str, shape: tuple[int, ...], wire: str) -> int:
    """Elements in a tensor of `shape`, or a clear error for a shape no array can have (negative or too many
    dimensions, a product past what numpy can index). Computes a number: allocates nothing (not even the
    message of an error it does not raise: this runs for every tensor of every request)."""
    if len(shape) > MAX_DIMS:
        raise invalid(f"input {quote_name(name)} has {len(shape)} dimensions; at most {MAX_DIMS} are supported")
    if not shape:
        return 1
    if min(shape) < 0:
        raise invalid(f"input {quote_name(name)} has a negative dimension in shape {_shown(shape)}")
    unit = max(element_size(wire), 8 if wire == "BYTES" else 1)
    nonzero = 1
    for dim in shape:
        nonzero *= dim or 1
        if nonzero * unit > _MAX_ELEMENTS_BYTES:
            raise invalid(f"input {quote_name(name)}: shape {_shown(shape)} is larger than any tensor can be")
    return 0 if 0 in shape else nonzero


def _shown(shape: tuple[int, ...]) -> str:
    return bounded(str(list(shape)), NAME_LIMIT)


def serialize_bytes(array: npt.NDArray[Any]) -> bytes:
    """BYTES tensor -> Triton's raw form: each element as 4-byte little-endian length + bytes, row-major."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        data = item if isinstance(item, bytes) else str(item).encode() if not isinstance(item, bytearray) else bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(raw: Buffer, count: int, name: str) -> npt.NDArray[np.object_]:
    """Triton's raw BYTES form -> object array of `count` elements; names the tensor when malformed.

    Elements are collected as the payload proves them (each takes at least its 4-byte length prefix), and the
    array is made only once all `count` are there: a small request cannot make the server allocate a huge
    array by declaring a huge shape."""
    view = memoryview(raw)
    items: list[bytes] = []
    offset = 0
    for i in range(count):
        if offset + 4 > len(view):
            raise invalid(
                f"input {quote_name(name)}: raw BYTES content ends after {i} of {count} elements "
                f"(no length prefix at byte {offset})"
            )
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise invalid(
                f"input {quote_name(name)}: element {i} declares {length} bytes but only {len(view) - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(view):
        raise invalid(f"input {quote_name(name)}: {len(view) - offset} unexpected trailing bytes after {count} elements")
    out = np.empty(count, dtype=np.object_)
    out[:] = items
    return out


def tensor_from_raw(name: str, wire: str, shape: tuple[int, ...], raw: Buffer) -> npt.NDArray[Any]:
    """An input sent as raw bytes (gRPC `raw_input_contents`, HTTP binary data) as an array of `shape`, checked
    against its bytes first; read in place (no copy) unless BYTES."""
    count = element_count(name, shape, wire)
    if wire == "BYTES":
        return deserialize_bytes(raw, count, name).reshape(shape)
    view = memoryview(raw)
    expected = count * element_size(wire)
    if len(view) != expected:
        raise invalid(
            f"unexpected total byte size {len(view)} for input {quote_name(name)}, expecting {expected} "
            f"({wire} shape {_shown(shape)})"
        )
    return np.frombuffer(view, dtype=wire_to_numpy(wire)).reshape(shape)


def to_bytes_array(array: npt.NDArray[Any]) -> npt.NDArray[np.object_]:
    """Normalise str/bytes/object arrays to an object array of bytes."""
    if array.dtype == np.object_:
        flat = [x if isinstance(x, bytes) else str(x).encode() for x in array.reshape(-1)]
    else:
        flat = [x if isinstance(x, bytes) else str(x).encode() for x in array.reshape(-1).tolist()]
    out = np.empty(len(flat), dtype=np.object_)
    out[:] = flat
    return out.reshape(array.shape)
