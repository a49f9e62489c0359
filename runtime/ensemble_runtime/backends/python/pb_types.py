"""Tensors, errors, data types and logging of the `triton_python_backend_utils` API."""

from __future__ import annotations

import logging
import struct
import types
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ensemble_runtime.dtypes import to_bytes_array
from ensemble_runtime.errors import ErrorCode

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# TRITONSERVER_DataType values (index = enum value) and their numpy types; BF16 has no numpy type.
_TRITON_NUMPY: tuple[type[Any] | None, ...] = (
    None, np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32,
    np.int64, np.float16, np.float32, np.float64, np.object_, None,
)  # fmt: skip
# numpy dtype -> TRITONSERVER_DataType value: the lookup every Tensor a model or the runtime builds makes
_NUMPY_TRITON: Mapping[np.dtype[Any], int] = types.MappingProxyType(
    {np.dtype(t): value for value, t in enumerate(_TRITON_NUMPY) if t is not None and t is not np.object_}
)
TRITON_STRING_TO_NUMPY: Mapping[str, type[Any]] = types.MappingProxyType(
    {
        "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
        "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
        "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
        "TYPE_STRING": np.object_,
    }
)  # fmt: skip


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    """TRITONSERVER_DataType value -> numpy type (None when there is none, as in Triton)."""
    return _TRITON_NUMPY[data_type] if 0 <= data_type < len(_TRITON_NUMPY) else None


def numpy_to_triton_type(data_type: npt.DTypeLike) -> int | None:
    """numpy dtype or type -> TRITONSERVER_DataType value (None when there is none, as in Triton)."""
    dtype = np.dtype(data_type)
    if dtype.kind in ("O", "S"):
        return 13
    known = _NUMPY_TRITON.get(dtype)
    if known is not None:
        return known
    for value, numpy_type in enumerate(_TRITON_NUMPY):
        if numpy_type is not None and numpy_type is not np.object_ and dtype == np.dtype(numpy_type):
            return value
    return None


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


class TritonError:
    """An error a model puts in an `InferenceResponse`; codes are TRITONSERVER_Error_Code values."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int | None = None) -> None:
        self._message = message
        self._code = TritonError.INTERNAL if code is None else code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """Raised by the API on misuse; a model may raise it too."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def message(self) -> str:
        return self._message


ERROR_TO_TRITON: Mapping[ErrorCode, int] = types.MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: TritonError.INVALID_ARG,
        ErrorCode.NOT_FOUND: TritonError.NOT_FOUND,
        ErrorCode.UNAVAILABLE: TritonError.UNAVAILABLE,
        ErrorCode.RESOURCE_EXHAUSTED: TritonError.UNAVAILABLE,
        ErrorCode.INTERNAL: TritonError.INTERNAL,
        ErrorCode.FAILED_PRECONDITION: TritonError.INTERNAL,
        ErrorCode.ALREADY_EXISTS: TritonError.ALREADY_EXISTS,
        ErrorCode.UNIMPLEMENTED: TritonError.UNSUPPORTED,
        ErrorCode.CANCELLED: TritonError.CANCELLED,
    }
)
_TRITON_TO_ERROR: Mapping[int, ErrorCode] = types.MappingProxyType(
    {
        TritonError.INVALID_ARG: ErrorCode.INVALID_ARGUMENT,
        TritonError.NOT_FOUND: ErrorCode.NOT_FOUND,
        TritonError.UNAVAILABLE: ErrorCode.UNAVAILABLE,
        TritonError.ALREADY_EXISTS: ErrorCode.ALREADY_EXISTS,
        TritonError.UNSUPPORTED: ErrorCode.UNIMPLEMENTED,
        TritonError.CANCELLED: ErrorCode.CANCELLED,
    }
)


def error_code_of(error: TritonError) -> ErrorCode:
    """The runtime's error code for a model's TritonError (INTERNAL unless the code says otherwise)."""
    return _TRITON_TO_ERROR.get(error.code(), ErrorCode.INTERNAL)


class Tensor:
    """A named tensor backed by a numpy array (BYTES: an object array of `bytes`; `str` is encoded)."""

    __slots__ = ("_array", "_name", "_triton_dtype")

    def __init__(self, name: str, numpy_array: npt.ArrayLike, triton_dtype: int | None = None) -> None:
        array = np.asarray(numpy_array)
        kind = array.dtype.kind
        if kind in ("U", "S") or (kind == "O" and not _all_bytes(array)):
            array = to_bytes_array(array)
        elif kind == "V":
            raise TritonModelException(f"tensor '{name}': structured/void numpy dtypes are not supported")
        if triton_dtype is not None:
            numpy_type = triton_to_numpy_type(triton_dtype)
            if numpy_type is None:
                raise TritonModelException(f"tensor '{name}': unsupported Triton data type {triton_dtype}")
            if array.dtype != np.dtype(numpy_type):
                array = array.view(numpy_type)
        else:  # (the common dtypes looked up here: no call per tensor)
            triton_dtype = _NUMPY_TRITON.get(array.dtype) or numpy_to_triton_type(array.dtype)
            if triton_dtype is None:
                raise TritonModelException(f"tensor '{name}': numpy dtype {array.dtype} has no Triton type")
        self._name = name
        self._array = array
        self._triton_dtype = triton_dtype

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        """The tensor's array, writable as Triton's is: a model may edit its inputs in place. An array over a
        read-only buffer (a request's bytes) is copied once, on first use, and that copy is the tensor's."""
        if not self._array.flags.writeable:
            self._array = self._array.copy()
        return self._array

    def triton_dtype(self) -> int:
        return self._triton_dtype

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        try:
            return self._array.__dlpack__()
        except (BufferError, TypeError) as exc:
            raise TritonModelException(f"tensor '{self._name}' cannot be exported as DLPack: {exc}") from None

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        try:
            array = np.from_dlpack(capsule)
        except (BufferError, TypeError, RuntimeError) as exc:
            raise TritonModelException(f"tensor '{name}': only CPU DLPack tensors are supported here: {exc}") from None
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, dtype={self._array.dtype}, shape={self._array.shape})"


def arrived(name: str, array: npt.NDArray[Any]) -> Tensor:
    """`Tensor(name, array)` for an input the runtime hands a model: a plain array of a numeric dtype Triton has a
    type for (what a request decodes to) skips the checks and conversions that cannot change it, one lookup
    instead; any other (BYTES, an ndarray subclass) takes them all."""
    triton_dtype = _NUMPY_TRITON.get(array.dtype) if type(array) is np.ndarray else None  # (a subclass: made plain)
    if triton_dtype is None:
        return Tensor(name, array)
    tensor = Tensor.__new__(Tensor)
    tensor._name = name
    tensor._array = array
    tensor._triton_dtype = triton_dtype
    return tensor


def _all_bytes(array: npt.NDArray[Any]) -> bool:
    return all(type(item) is bytes for item in array.flat)


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> npt.NDArray[np.object_] | None:
    """BYTES tensor -> a one-element object array holding the length-prefixed bytes (Triton's form)."""
    if input_tensor.size == 0:
        return None
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts: list[bytes] = []
    for item in input_tensor.reshape(-1, order="C"):
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    out = np.empty(1, dtype=np.object_)
    out[0] = b"".join(parts)
    return out


def deserialize_bytes_tensor(encoded_tensor: bytes) -> npt.NDArray[np.object_]:
    """Length-prefixed bytes -> a one-dimensional object array of `bytes`."""
    items: list[bytes] = []
    view = memoryview(encoded_tensor)
    offset = 0
    while offset < len(view):
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Triton's model logger, writing to Python logging under `triton_python_backend`."""

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        Logger._emit(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        Logger._emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger._emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger._emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger._emit(message, LogLevel.VERBOSE)

    @staticmethod
    def _emit(message: str, level: int) -> None:
        python_level = {
            LogLevel.WARNING: logging.WARNING,
            LogLevel.ERROR: logging.ERROR,
            LogLevel.VERBOSE: logging.DEBUG,
        }.get(level, logging.INFO)
        logging.getLogger("triton_python_backend").log(python_level, "%s", message, stacklevel=3)
