"""The native HTTP core writes the JSON header of an answer whose outputs go back as binary data
(`HttpCall.reply_binary`, its header as `_native.binary_reply_head`), or, from the response's own arrays, as
binary data or JSON `data` in the header (`HttpCall.reply_response`, its header as `_native.infer_reply_head`);
Python encodes every other answer. Where the core writes it, it must be byte for byte what the Python encoder
(`http_codec.encode_infer_parts`) writes, and the binary data the same. In process: no server needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol._native import binary_reply_head, infer_reply_head
from hypothesis import given
from hypothesis import strategies as st

# Any text: control characters, quotes, backslashes, non-ASCII, beyond the BMP, now and then a lone surrogate.
TEXT = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(["\ud800", "a\udfff"])
UNICODE = st.text(st.characters(), max_size=12)
WRITTEN = st.booleans() | st.integers(-(2**63), 2**64 - 1) | UNICODE  # what the core writes itself
VALUES = WRITTEN | st.integers(-(2**70), 2**70) | TEXT | st.floats(allow_nan=False, allow_infinity=False)
DTYPES = (np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint16, np.uint64, np.bool_)


@st.composite
def answers(draw: st.DrawFn) -> tuple[InferResponse, codec.DecodedInfer]:
    outputs: dict[str, Any] = {}
    for name in draw(st.lists(UNICODE.filter(bool), min_size=1, max_size=3, unique=True)):
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        if draw(st.booleans()):
            array = np.empty(shape, dtype=np.object_)
            array.reshape(-1)[:] = [draw(st.binary(max_size=6)) for _ in range(array.size)]
        else:
            array = (np.arange(int(np.prod(shape))) % 2).astype(draw(st.sampled_from(DTYPES))).reshape(shape)
        outputs[name] = array
    text, values = (UNICODE, WRITTEN) if draw(st.booleans()) else (TEXT, VALUES)  # half of them all written
    parameters = draw(st.dictionaries(text, values, max_size=3))
    response = InferResponse(draw(text), draw(text), outputs, draw(text), parameters)
    request = InferRequest("m", inputs={}, requested_outputs=list(outputs), output_parameters={})
    return response, codec.DecodedInfer(request, {}, binary_default=True)



def _octets(chunk: codec.Chunk) -> memoryview:
    """A binary output's bytes as the reply carries them (an array's must be contiguous)."""
    return memoryview(chunk if isinstance(chunk, bytes) else chunk.data).cast("B")


@given(answer=answers())
def test_the_core_writes_the_header_python_writes(answer: tuple[InferResponse, codec.DecodedInfer]) -> None:
    response, decoded = answer
    outputs = codec.binary_outputs(response, decoded)
    assert outputs is not None
    sized = [(name, wire, list(shape), len(_octets(data))) for name, wire, shape, data in outputs]
    ours = binary_reply_head(response.model_name, response.model_version, response.id, response.parameters, sized)
    head, chunks = codec.encode_infer_parts(response, decoded)
    assert [bytes(_octets(d)) for *_, d in outputs] == [bytes(_octets(c)) for c in chunks]
    if ours is None:  # left to Python: a float parameter, an integer past 64 bits, or text that is not Unicode
        values = response.parameters.values()
        strings = [response.model_name, response.model_version, response.id, *response.parameters, *response.outputs]
        strings += [v for v in values if isinstance(v, str)]
        unwritten = [v for v in values if isinstance(v, float) or (isinstance(v, int) and not -(2**63) <= v < 2**64)]
        assert unwritten or any(not _unicode(s) for s in strings)
        return
    assert ours == head


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def test_json_and_shared_memory_outputs_are_left_to_python() -> None:
    response = InferResponse("m", "1", {"Y": np.zeros(2, np.float32)})
    json_output = InferRequest("m", requested_outputs=["Y"], output_parameters={"Y": {"binary_data": False}})
    assert codec.binary_outputs(response, codec.DecodedInfer(json_output, {}, binary_default=True)) is None
    default = InferRequest("m", requested_outputs=["Y"])
    assert codec.binary_outputs(response, codec.DecodedInfer(default, {}, binary_default=False)) is None
    shm = InferRequest("m", output_parameters={"Y": {"shared_memory_region": "r", "shared_memory_byte_size": 8}})
    assert codec.binary_outputs(response, codec.DecodedInfer(shm, {}, binary_default=True)) is None
    empty = InferResponse("m", "1", {})
    assert codec.binary_outputs(empty, codec.DecodedInfer(default, {}, binary_default=True)) is None


# Values of every magnitude (the float writer's positional and exponent forms, subnormals, ties), and now and
# then NaN or an infinity, which JSON cannot carry.
NUMBERS = st.floats(width=64) | st.floats(width=32) | st.floats(width=16) | st.integers(-(2**63), 2**63 - 1)
JSON_DTYPES = (*DTYPES, np.int16, np.uint8, np.uint32)


@st.composite
def mixed_answers(draw: st.DrawFn) -> tuple[InferResponse, codec.DecodedInfer]:
    """Numpy arrays with any values (numbers, or BYTES elements of bytes, text, or either in fixed-size arrays),
    each output asked for as JSON or as binary data."""
    outputs: dict[str, Any] = {}
    asked: dict[str, dict[str, Any]] = {}
    for name in draw(st.lists(UNICODE.filter(bool), min_size=1, max_size=3, unique=True)):
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        size = int(np.prod(shape))
        asked[name] = {"binary_data": draw(st.booleans())}
        kind = draw(st.sampled_from(["number", "number", "object", "S", "U"]))
        if kind != "number":
            items: list[Any] = draw(st.lists(st.binary(max_size=5) | TEXT, min_size=size, max_size=size))
            if kind == "object":
                array = np.empty(size, dtype=np.object_)
                array[:] = items
            else:  # fixed-size bytes or text, as numpy makes them of such items (trailing NULs dropped)
                typed = [i for i in items if isinstance(i, bytes if kind == "S" else str) and "\x00" not in str(i)]
                array = np.array(typed[:size] + [b"x" if kind == "S" else "x"] * (size - len(typed[:size])), dtype=kind)
                if kind == "U" and not all(map(_unicode, array.tolist())):
                    array = np.full(size, "u", dtype="U")
            outputs[name] = array.reshape(shape)
            continue
        dtype = np.dtype(draw(st.sampled_from(JSON_DTYPES)))
        values = draw(st.lists(NUMBERS, min_size=size, max_size=size))
        with np.errstate(all="ignore"):
            flat = np.array(values, dtype=np.float64)
            if dtype.kind in "iub":
                flat = np.nan_to_num(flat, nan=0, posinf=1, neginf=-1) % 1000
            outputs[name] = flat.astype(dtype).reshape(shape)
    parameters: dict[str, Any] = draw(st.dictionaries(UNICODE, WRITTEN, max_size=2))
    response = InferResponse(draw(UNICODE), draw(UNICODE), outputs, draw(UNICODE), parameters)
    request = InferRequest("m", inputs={}, requested_outputs=list(outputs), output_parameters=asked)
    return response, codec.DecodedInfer(request, {}, binary_default=False)


@given(answer=mixed_answers())
def test_the_core_writes_json_data_as_python_does(answer: tuple[InferResponse, codec.DecodedInfer]) -> None:
    response, decoded = answer
    as_json = codec.json_outputs(response, decoded)
    assert as_json is not None
    ours = infer_reply_head(response, as_json)
    try:
        head, chunks = codec.encode_infer_parts(response, decoded)
    except Exception:
        assert ours is None  # NaN or an infinity as JSON: Python refuses it with its message
        return
    if ours is None:  # left to Python: text that is not Unicode, a BYTES output as binary data, bytes not UTF-8
        strings = [response.model_name, response.model_version, response.id, *response.parameters, *response.outputs]
        strings += [v for v in response.parameters.values() if isinstance(v, str)]
        texts = [(n, e) for n, a in response.outputs.items() if a.dtype.kind in "OSU" for e in a.reshape(-1)]
        strings += [e for _, e in texts if isinstance(e, str)]
        bytes_outputs = [n for n, a in response.outputs.items() if a.dtype.kind in "OSU"]
        assert (any(not _unicode(s) for s in strings) or any(n not in as_json for n in bytes_outputs)
                or any(isinstance(e, bytes) and not _utf8(e) for _, e in texts))
        return
    assert ours == head
    binary = [a for name, a in response.outputs.items() if name not in as_json]
    assert all(a.dtype.kind not in "OSU" for a in binary)
    assert [a.tobytes() for a in binary] == [bytes(c) for c in chunks]


def test_the_core_declines_what_it_does_not_write() -> None:
    decoded = codec.DecodedInfer(InferRequest("m", requested_outputs=["Y"]), {}, binary_default=False)
    nan = InferResponse("m", "1", {"Y": np.array([1.0, np.nan], np.float32)})
    assert codec.json_outputs(nan, decoded) == ("Y",) and infer_reply_head(nan, ("Y",)) is None
    assert infer_reply_head(nan, ()) is not None  # as binary data NaN is fine
    text = InferResponse("m", "1", {"Y": np.array([b"a", "\u00e9"], np.object_)})
    assert infer_reply_head(text, ()) is None  # BYTES as binary data: Python's (reply_binary)
    assert infer_reply_head(text, ("Y",)) == codec.encode_infer_parts(text, decoded)[0]
    not_utf8 = InferResponse("m", "1", {"Y": np.array([b"\xff"], np.object_)})
    assert infer_reply_head(not_utf8, ("Y",)) is None  # Python refuses it with its message
