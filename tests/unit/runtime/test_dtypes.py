from __future__ import annotations

import numpy as np
import pytest
from ensemble_runtime.dtypes import (
    config_to_wire,
    deserialize_bytes,
    element_count,
    element_size,
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


@pytest.mark.parametrize(
    ("wire", "size"),
    [("BOOL", 1), ("INT8", 1), ("UINT16", 2), ("FP16", 2), ("BF16", 2), ("INT32", 4), ("FP32", 4), ("UINT64", 8),
     ("FP64", 8), ("BYTES", 0)],
)
def test_element_size(wire: str, size: int) -> None:
    assert element_size(wire) == size


def test_element_size_of_an_unknown_type_is_invalid() -> None:
    with pytest.raises(InferenceError, match="unsupported datatype 'FP8'") as info:
        element_size("FP8")
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("shape", "count"), [((), 1), ((3,), 3), ((2, 3, 4), 24), ((2, 0, 5), 0), ((0,), 0), ((1,) * 32, 1)]
)
def test_element_count(shape: tuple[int, ...], count: int) -> None:
    assert element_count("x", shape, "FP32") == count


@pytest.mark.parametrize(
    ("shape", "wire", "message"),
    [
        ((1,) * 33, "FP32", "input 'x' has 33 dimensions; at most 32 are supported"),
        ((2, -1), "FP32", "input 'x' has a negative dimension in shape [2, -1]"),
        ((2**32, 2**31), "FP32", "input 'x': shape [4294967296, 2147483648] is larger than any tensor can be"),
        ((2**31, 2**29), "BYTES", "input 'x': shape [2147483648, 536870912] is larger than any tensor can be"),
        ((2**62, 0), "INT8", None),  # a zero dimension makes no tensor huge: counted as 0, within bounds
        ((3,), "FP8", "unsupported datatype 'FP8'"),
    ],
)
def test_element_count_refuses_shapes_no_array_can_have(shape: tuple[int, ...], wire: str, message: str | None) -> None:
    if message is None:
        assert element_count("x", shape, wire) == 0
        return
    with pytest.raises(InferenceError) as info:
        element_count("x", shape, wire)
    assert (info.value.code, info.value.message) == (ErrorCode.INVALID_ARGUMENT, message)


def test_element_count_of_no_dimensions_needs_no_known_type() -> None:
    assert element_count("x", (), "FP8") == 1  # a scalar: nothing to multiply, the type is checked elsewhere
