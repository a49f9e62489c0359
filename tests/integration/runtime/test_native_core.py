"""The native core alone, in this process, with a real gRPC client: calls arrive as one batch per wake-up of the
event loop, ModelInfer decoded with its raw contents readable in place by numpy, the reply encoded by the core;
restricted methods refused before Python sees them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import numpy as np
import pytest
import pytest_asyncio
from ensemble_runtime.protocol._native import Call, GrpcCore, StreamCall, StreamFrame
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

pytestmark = pytest.mark.asyncio
HEADER = "triton-grpc-protocol-key"
STATS = "/inference.GRPCInferenceService/ModelStatistics"


@pytest_asyncio.fixture
async def core() -> AsyncIterator[tuple[GrpcCore, int, asyncio.Queue[list[Call | StreamCall | StreamFrame]]]]:
    core = GrpcCore(1 << 20, [(STATS, HEADER, "v", "This protocol is restricted, expecting header 'x'")], 1)
    port = core.start("127.0.0.1", 0)
    batches: asyncio.Queue[list[Call | StreamCall | StreamFrame]] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    loop.add_reader(core.fileno(), lambda: batches.put_nowait(core.take()))
    try:
        yield core, port, batches
    finally:
        loop.remove_reader(core.fileno())
        await asyncio.to_thread(core.stop, 1.0)


async def _next_call(batches: asyncio.Queue[list[Call | StreamCall | StreamFrame]]) -> Call:
    while True:
        batch = await batches.get()  # an empty batch is a wake-up whose calls came with the one before
        if batch:
            assert len(batch) == 1
            assert isinstance(batch[0], Call)
            return batch[0]


async def test_model_infer_decoded_in_place_and_encoded_by_the_core(
    core: tuple[GrpcCore, int, asyncio.Queue[list[Call | StreamCall | StreamFrame]]],
) -> None:
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


async def test_forwarded_bytes_and_statuses(
    core: tuple[GrpcCore, int, asyncio.Queue[list[Call | StreamCall | StreamFrame]]],
) -> None:
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
        assert batches.empty()  # refused in the core: Python never saw it
        allowed = asyncio.ensure_future(asyncio.to_thread(restricted, b"", timeout=30, metadata=((HEADER, "v"),)))
        call = await _next_call(batches)
        call.reply(b"")
        await allowed
