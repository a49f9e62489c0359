from __future__ import annotations

import numpy as np
import pytest
from ensemble_runtime.dtypes import (
    config_to_wire,
    deserialize_bytes,
    numpy_to_wire,
    serialize_bytes,
    to_bytes_array,
    wire_to_config,
    wire_to_numpy,
)
from ensemble_runtime.errors import ErrorCode, InferenceError


@pytest.mark.parametrize(
    ("config", "wire", "dtype"),
    [
        ("TYPE_FP32", "FP32", np.float32),
        ("TYPE_FP16", "FP16", np.float16),
        ("TYPE_INT8", "INT8", np.int8),
        ("TYPE_BOOL", "BOOL", np.bool_),
        ("TYPE_UINT64", "UINT64", np.uint64),
        ("TYPE_STRING", "BYTES", np.object_),
    ],
)
def test_type_names(config: str, wire: str, dtype: type) -> None:
    assert config_to_wire(config) == wire
    assert wire_to_config(wire) == config
    assert wire_to_numpy(wire) == np.dtype(dtype)
    assert numpy_to_wire(np.dtype(dtype)) == wire


def test_bytes_roundtrip() -> None:
    array = to_bytes_array(np.array([["a", "bc"], ["", "déf"]], dtype=object))
    raw = serialize_bytes(array)
    back = deserialize_bytes(raw, 4, "t").reshape(2, 2)
    assert back.tolist() == [[b"a", b"bc"], [b"", "déf".encode()]]


@pytest.mark.parametrize(
    ("raw", "count", "message"),
    [
        (b"\x05\x00\x00\x00abc", 1, "element 0 declares 5 bytes but only 3 remain"),
        (b"\x01\x00\x00\x00a", 2, "ends after 1 of 2 elements"),
        (b"\x01\x00\x00\x00ab", 1, "1 unexpected trailing bytes"),
        (b"\x01\x00", 1, "ends after 0 of 1 elements"),
    ],
)
def test_malformed_bytes_named(raw: bytes, count: int, message: str) -> None:
    with pytest.raises(InferenceError, match=message) as info:
        deserialize_bytes(raw, count, "text")
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    assert "'text'" in info.value.message


def test_unknown_wire_type() -> None:
    with pytest.raises(InferenceError, match="unsupported datatype 'FP8'"):
        wire_to_numpy("FP8")
