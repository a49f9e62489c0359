"""The native core alone, in this process, with a real gRPC client: calls arrive as one batch per wake-up of the
event loop, ModelInfer decoded with its raw contents readable in place by numpy, the reply encoded by the core;
restricted methods refused before Python sees them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import grpc
import numpy as np
import pytest
import pytest_asyncio
from ensemble_runtime.dtypes import serialize_bytes
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import grpc_codec
from ensemble_runtime.protocol._native import Call, GrpcCore, StreamCall, StreamFrame, StreamWritable
from ensemble_runtime.protocol.native_grpc import new_core
from ensemble_runtime.settings import GrpcConnections
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

pytestmark = pytest.mark.asyncio
HEADER = "triton-grpc-protocol-key"
STATS = "/inference.GRPCInferenceService/ModelStatistics"
Batches = asyncio.Queue[list[Call | StreamCall | StreamFrame | StreamWritable]]  # what the core hands over, as taken
Started = tuple[GrpcCore, int, Batches]  # a core serving on a port, and its batches


@pytest_asyncio.fixture
async def core() -> AsyncIterator[Started]:
    restricted = [(STATS, HEADER, "v", "This protocol is restricted, expecting header 'x'")]
    core = new_core(1 << 20, restricted, 1, GrpcConnections())
    port = core.start("127.0.0.1", 0)
    batches: Batches = asyncio.Queue()
    loop = asyncio.get_running_loop()
    loop.add_reader(core.fileno(), lambda: batches.put_nowait(core.take()))
    try:
        yield core, port, batches
    finally:
        loop.remove_reader(core.fileno())
        await asyncio.to_thread(core.stop, 1.0)


async def _next_call(batches: Batches) -> Call:
    while True:
        batch = await batches.get()  # an empty batch is a wake-up whose calls came with the one before
        if batch:
            assert len(batch) == 1
            assert isinstance(batch[0], Call)
            return batch[0]


async def test_model_infer_decoded_in_place_and_encoded_by_the_core(core: Started) -> None:
    _, port, batches = core
    request = pb.ModelInferRequest(model_name="m", model_version="1", id="q")
    request.inputs.add(name="IN", datatype="FP32", shape=[1, 4]).parameters["p"].int64_param = 7
    request.outputs.add(name="OUT")
    request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        pending = asyncio.ensure_future(asyncio.to_thread(stub.ModelInfer, request, timeout=30))
        call = await _next_call(batches)
        assert call.method == "/inference.GRPCInferenceService/ModelInfer"
        view = call.request
        assert (view.model_name, view.model_version, view.id) == ("m", "1", "q")
        (tensor,) = view.inputs
        assert (tensor.name, tensor.datatype, tensor.shape, tensor.parameters) == ("IN", "FP32", (1, 4), {"p": 7})
        assert not tensor.HasField("contents")
        raw = view.raw_input_contents[0]
        array = np.frombuffer(memoryview(raw), np.float32)
        base = array.base
        assert isinstance(base, memoryview) and base.obj is raw  # the core's bytes, not a copy
        assert not array.flags.writeable
        doubled = (array * 2).reshape(1, 4)
        call.reply_infer("m", "1", "q", {"flag": True, "n": 3, "x": 0.5, "s": "t"},
                         [("OUT", "FP32", (1, 4), doubled.reshape(-1).view(np.uint8))])
        with pytest.raises(RuntimeError):
            call.fail(13, "twice")  # a call is answered once
        response = await pending
    assert (response.model_name, response.id, response.outputs[0].name) == ("m", "q", "OUT")
    assert list(response.outputs[0].shape) == [1, 4]
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], np.float32), [0, 2, 4, 6])
    assert response.parameters["flag"].bool_param and response.parameters["n"].int64_param == 3
    assert response.parameters["x"].double_param == 0.5 and response.parameters["s"].string_param == "t"


async def test_forwarded_bytes_and_statuses(core: Started) -> None:
    _, port, batches = core
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        meta = channel.unary_unary("/inference.GRPCInferenceService/ServerMetadata")
        pending = asyncio.ensure_future(asyncio.to_thread(meta, b"\x01\x02", timeout=30))
        call = await _next_call(batches)
        assert (call.method, call.payload) == ("/inference.GRPCInferenceService/ServerMetadata", b"\x01\x02")
        call.fail(5, "not here")
        with pytest.raises(grpc.RpcError) as failed:
            await pending
        assert (failed.value.code(), failed.value.details()) == (grpc.StatusCode.NOT_FOUND, "not here")
        restricted = channel.unary_unary(STATS)
        with pytest.raises(grpc.RpcError) as refused:
            await asyncio.to_thread(restricted, b"\xff", timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        arrived = [batches.get_nowait() for _ in range(batches.qsize())]
        # refused in the core: Python never saw it (at most one empty wake-up, from the call before, is allowed)
        assert len(arrived) <= 1 and not any(arrived), arrived
        allowed = asyncio.ensure_future(asyncio.to_thread(restricted, b"", timeout=30, metadata=((HEADER, "v"),)))
        call = await _next_call(batches)
        call.reply(b"")
        await allowed


@contextlib.asynccontextmanager
async def _held(core: Started, request: pb.ModelInferRequest) -> AsyncIterator[Call]:
    """`request` sent to the core by a real client: its call, held until the block ends, then failed."""
    _, port, batches = core
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        pending = asyncio.ensure_future(asyncio.to_thread(stub.ModelInfer, request, timeout=30))
        call = await _next_call(batches)
        yield call
        call.fail(13, "done")
        with pytest.raises(grpc.RpcError):
            await pending


def _message(shape: list[int], datatype: str = "FP32", raw: list[bytes] | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", model_version="2", id="r")
    request.parameters["priority"].int64_param = 1
    request.inputs.add(name="IN", datatype=datatype, shape=shape).parameters["note"].string_param = "n"
    request.outputs.add(name="OUT").parameters["classification"].int64_param = 2
    request.raw_input_contents.extend([np.arange(4, dtype=np.float32).tobytes()] if raw is None else raw)
    return request


def _add_input(request: pb.ModelInferRequest, name: str, datatype: str, shape: list[int], raw: bytes) -> None:
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)


def _decoded(decode: Callable[[Any], tuple[InferRequest, dict[str, str]]], message: Any) -> tuple[object, ...]:
    """A decoder's request and declared datatypes (arrays as their dtype, shape and values), or its error."""
    try:
        request, declared = decode(message)
    except InferenceError as exc:
        return exc.code, exc.message
    arrays = {name: (a.dtype.str, a.shape, a.tolist()) for name, a in request.inputs.items()}
    return replace(request, inputs={}), arrays, declared


def _owner(array: np.ndarray) -> object:
    """What holds an array's memory: the object its chain of views ends in (a memoryview's own object)."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def _parity_cases() -> dict[str, tuple[pb.ModelInferRequest, bool]]:
    """(request, whether the core finds it plain) by name: each is decoded through the core's view and through
    protobuf."""
    two = _message([2, 2])
    _add_input(two, "TEXT", "BYTES", [2], serialize_bytes(np.array([b"ab", b""], dtype=np.object_)))
    input_twice = _message([4])
    _add_input(input_twice, "IN", "FP32", [4], bytes(16))
    output_twice = _message([4])
    output_twice.outputs.add(name="OUT")
    typed = _message([4], raw=[])
    typed.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
    typed_and_raw = _message([4])
    typed_and_raw.inputs[0].contents.fp32_contents.append(1)
    output_in_shm = _message([4])
    output_in_shm.outputs[0].parameters["shared_memory_region"].string_param = "region"
    every_fixed = pb.ModelInferRequest(model_name="m")
    for index, dtype in enumerate(map(np.dtype, ("?", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4",
                                                 "f8"))):
        wire = dtype.name.upper().replace("FLOAT", "FP")
        _add_input(every_fixed, f"IN{index}", wire, [2, 3], np.arange(6).astype(dtype).tobytes())
    short_second = _message([4])
    _add_input(short_second, "IN2", "INT32", [4], bytes(12))
    return {
        "plain": (_message([1, 4]), True),
        "plain, two inputs, BYTES among them": (two, True),
        "no inputs": (pb.ModelInferRequest(model_name="m"), True),
        "wrong byte size": (_message([1, 5]), True),
        "negative dimension": (_message([-1, 4]), True),
        "malformed BYTES": (_message([3], "BYTES"), True),
        "every fixed-size datatype": (every_fixed, True),
        "a scalar": (_message([], raw=[bytes(4)]), True),
        "an empty tensor": (_message([0, 4], raw=[b""]), True),
        "too many dimensions": (_message([1] * 33, raw=[bytes(4)]), True),
        "larger than any tensor": (_message([2**62, 4], raw=[b""]), True),
        "a zero dimension beside a huge one": (_message([0, 2**62], raw=[b""]), True),
        "second input's bytes short": (short_second, True),
        "an input twice": (input_twice, False),
        "an output twice": (output_twice, False),
        "BF16": (_message([4], "BF16", [bytes(8)]), False),
        "unknown datatype": (_message([4], "FP8"), False),
        "raw contents for no input": (_message([4], raw=[bytes(16), b"\0"]), False),
        "typed contents": (typed, False),
        "typed and raw contents": (typed_and_raw, False),
        "an output in shared memory": (output_in_shm, False),
    }


_PARITY = _parity_cases()


@pytest.mark.parametrize("case", list(_PARITY))
async def test_plain_requests_decode_from_the_view_as_from_protobuf(core: Started, case: str) -> None:
    """`decode_view` builds a plain request from the core's tensors: the same request, or the same error, as
    `decode_request` makes of the protobuf message; anything not plain is left to `decode_request`."""
    request, plain = _PARITY[case]
    async with _held(core, request) as call:
        view = call.request
        assert (view.plain is not None) == plain
        from_view = _decoded(grpc_codec.decode_view, view)
        from_protobuf = _decoded(grpc_codec.decode_request, request)
        assert from_view == from_protobuf
        if view.plain is not None:  # the core built the arrays where every input is fixed-size and fits its bytes
            fixed = all(datatype != "BYTES" for _, datatype, _, _ in view.plain)
            assert (view.arrays is not None) == (fixed and isinstance(from_view[0], InferRequest))
            assert (view.declared is not None) == (view.arrays is not None)
        if view.plain is not None and isinstance(from_view[0], InferRequest):  # decoded: numbers read in place
            inputs = grpc_codec.decode_view(view)[0].inputs
            for name, datatype, _, data in view.plain:
                assert datatype == "BYTES" or _owner(inputs[name]) is data


async def test_the_views_lists_are_built_once_as_sent(core: Started) -> None:
    """The protobuf-like lists of a view (`inputs`, `outputs`, `plain`) are built on first read: the same objects on
    every read after, with the tensors as sent (a repeated output twice, each with its parameters)."""
    request = _message([1, 4])
    request.outputs.add(name="OUT").parameters["binary_data"].bool_param = True
    async with _held(core, request) as call:
        view = call.request
        assert view.arrays is None  # an output twice: not plain
        assert view.plain is None and view.plain is None
        inputs, outputs = view.inputs, view.outputs
        assert view.inputs is inputs and view.outputs is outputs
        assert [(t.name, t.datatype, t.shape, t.parameters) for t in inputs] == [("IN", "FP32", (1, 4), {"note": "n"})]
        assert [(o.name, o.parameters) for o in outputs] == [("OUT", {"classification": 2}), ("OUT", {"binary_data": True})]
        assert view.output_parameters == {"OUT": {"binary_data": True}}


def _reply_cases() -> dict[str, tuple[dict[str, np.ndarray], bool]]:
    """Outputs, and whether the core writes them as they are (`Call.reply_response`) or leaves them to Python."""
    numbers = np.arange(12)
    cases: dict[str, tuple[dict[str, np.ndarray], bool]] = {
        dtype.name: ({"OUT": numbers.astype(dtype).reshape(3, 4)}, True)
        for dtype in map(np.dtype, (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                    np.uint32, np.uint64, np.float16, np.float32, np.float64))
    }
    cases |= {
        "longlong": ({"OUT": numbers.astype(np.longlong)}, True),
        "scalar": ({"OUT": np.array(2.5, np.float32)}, True),
        "empty": ({"OUT": np.zeros((0, 3), np.int32)}, True),
        "two outputs": ({"A": numbers.astype(np.float32), "B": numbers[:5].astype(np.int64)}, True),
        "none": ({}, True),
        "bytes": ({"OUT": np.array([b"ab", b""], dtype=np.object_)}, False),
        "big-endian": ({"OUT": numbers.astype(">f4")}, False),
        "not contiguous": ({"OUT": numbers.astype(np.float32).reshape(3, 4)[:, ::2]}, False),
        "fortran order": ({"OUT": np.asfortranarray(numbers.astype(np.int32).reshape(3, 4))}, False),
        "one of two bytes": ({"A": numbers.astype(np.float32), "B": np.array([b"x"], dtype=np.object_)}, False),
        "a subclass": ({"OUT": np.ma.masked_array(numbers.astype(np.float32))}, False),
    }
    return cases


_REPLIES = _reply_cases()


@pytest.mark.parametrize("case", list(_REPLIES))
async def test_responses_written_by_the_core_as_by_python(core: Started, case: str) -> None:
    """`Call.reply_response` writes an answer whose outputs are all plain numpy arrays, with the same message
    `grpc_codec.encode_response` makes of it; for anything else it does nothing and says so, and Python's
    conversion answers (the call is still unanswered)."""
    outputs, written = _REPLIES[case]
    response = InferResponse("m", "3", outputs, id="q", parameters={"flag": True, "n": -3, "x": 0.5, "s": "t"})
    _, port, batches = core
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        pending = asyncio.ensure_future(asyncio.to_thread(stub.ModelInfer, _message([1]), timeout=30))
        call = await _next_call(batches)
        assert call.reply_response(response) is written
        refused = None
        if not written:
            try:
                call.reply_infer("m", "3", "q", response.parameters, grpc_codec.output_payloads(response))
            except InferenceError as exc:  # a dtype Triton has no name for: Python's own refusal
                refused = exc.message
                call.fail(13, refused)
        with pytest.raises(RuntimeError):
            call.fail(13, "twice")  # a call is answered once
        if refused is not None:
            with pytest.raises(grpc.RpcError) as error:
                await pending
            assert error.value.details() == refused == "numpy dtype >f4 has no Triton equivalent"
            return
        answered = await pending
    assert answered == grpc_codec.encode_response(response)
