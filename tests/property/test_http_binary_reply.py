"""The native HTTP core writes the JSON header of an answer whose outputs all go back as binary data
(`HttpCall.reply_binary`, its header as `_native.binary_reply_head`); Python encodes every other answer. Where
the core writes it, it must be byte for byte what the Python encoder (`http_codec.encode_infer_parts`)
writes, and the binary data the same. In process: no server needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol._native import binary_reply_head
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


@given(answer=answers())
def test_the_core_writes_the_header_python_writes(answer: tuple[InferResponse, codec.DecodedInfer]) -> None:
    response, decoded = answer
    outputs = codec.binary_outputs(response, decoded)
    assert outputs is not None
    sized = [(name, wire, list(shape), len(memoryview(data).cast("B"))) for name, wire, shape, data in outputs]
    ours = binary_reply_head(response.model_name, response.model_version, response.id, response.parameters, sized)
    head, chunks = codec.encode_infer_parts(response, decoded)
    assert [bytes(memoryview(d).cast("B")) for *_, d in outputs] == [bytes(memoryview(c).cast("B")) for c in chunks]
    if ours is None:  # left to Python: a float parameter, an integer past 64 bits, or text that is not Unicode
        values = response.parameters.values()
        strings = [response.model_name, response.model_version, response.id, *response.parameters, *response.outputs]
        strings += [v for v in values if isinstance(v, str)]
        unwritten = [v for v in values if isinstance(v, float) or (isinstance(v, int) and not -(2**63) <= v < 2**64)]
        assert unwritten or any(not _unicode(s) for s in strings)
        return
    assert ours == head


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
