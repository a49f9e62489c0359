"""Streams through the native core. ModelStreamInfer: its frames, decoded by the core into the view ModelInfer
gets (`StreamFrame.request`), feed the same `StreamSession` the grpcio front end runs, and its responses are
encoded by the core (`StreamCall.encode_response`; `NativeCodec`): no protobuf object on the way, except for an
error, or outputs the core does not write as they are (BYTES, shared memory). The session pulls requests (one
`want` per request it reads), so its in-flight limit still bounds how much of the stream the core reads;
responses go out through the core's bounded window (`Outlet`), so when the client stops reading the session
waits, as HTTP/2 flow control makes it wait under grpcio. Health Watch: the health servicer's own Watch, writing
through the stream, ended when the client goes away."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Generic, NoReturn, TypeVar

import grpc
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2 as pb

from ensemble_runtime.errors import invalid
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import grpc_codec
from ensemble_runtime.protocol._native import EncodedMessage, InferRequestView, StreamCall, StreamFrame
from ensemble_runtime.protocol.grpc_stream import EMPTY_FINAL, FINAL, stream_error
from ensemble_runtime.protocol.native_calls import CANCELLED, INVALID_ARGUMENT, UNAVAILABLE, RpcAbort
from ensemble_runtime.protocol.offload import response_size, sized
from ensemble_runtime.shared_memory import SharedMemoryRegistry, ShmRef

log = logging.getLogger(__name__)
M = TypeVar("M")


class Inbound(Generic[M]):
    """The requests of one stream, parsed, as the frames the core reads come in (`deliver`)."""

    def __init__(self, stream: StreamCall, parse: Callable[[StreamFrame], M]) -> None:
        self._stream = stream
        self._parse = parse  # a frame's request, from its payload
        self._method = stream.method.rsplit("/", 1)[-1]
        self._frames: asyncio.Queue[StreamFrame] = asyncio.Queue()

    def deliver(self, frame: StreamFrame) -> None:
        self._frames.put_nowait(frame)

    def __aiter__(self) -> AsyncIterator[M]:
        return self

    async def __anext__(self) -> M:
        self._stream.want()
        frame = await self._frames.get()
        if not frame.has_payload:
            if frame.code == 0:
                raise StopAsyncIteration
            raise RpcAbort(frame.code, frame.message)
        try:
            return self._parse(frame)
        except Exception as exc:  # the answer decode_guard gives under grpcio
            raise RpcAbort(INVALID_ARGUMENT, f"the {self._method} request is not a valid protobuf message "
                                             f"({type(exc).__name__})") from exc

    async def failure(self) -> RpcAbort:
        """Waits for the stream to fail (the client went away), reading no further requests."""
        while True:
            frame = await self._frames.get()
            if frame.payload is None and frame.code != 0:
                return RpcAbort(frame.code, frame.message)


SENT, FULL = 0, 1  # StreamCall.send: 2 is the stream has ended


class Outlet:
    """The way out of one stream: `send` waits while the core's window is full (the client is not reading)."""

    def __init__(self, stream: StreamCall) -> None:
        self._stream = stream
        self._writable = asyncio.Event()
        self._gone = False

    def writable(self) -> None:
        """The core drained a message: a refused one may be offered again."""
        self._writable.set()

    def gone(self) -> None:
        """The client went away: nothing more goes out."""
        self._gone = True
        self._writable.set()

    async def send(self, message: bytes | EncodedMessage) -> bool:
        """Sends one message, waiting for room; False when the stream has ended (the client went away)."""
        while not self._gone:
            self._writable.clear()  # a notice taken after the refusal below wakes the wait
            offer = self._stream.send(message)
            if offer == SENT:
                return True
            if offer != FULL:
                return False
            await self._writable.wait()
        return False


class StreamContext:
    """The part of a grpc.aio context a response-streaming handler uses: `write`, `abort`."""

    def __init__(self, outlet: Outlet) -> None:
        self._outlet = outlet

    async def write(self, message: Any) -> None:
        if not await self._outlet.send(message.SerializeToString()):
            raise RpcAbort(CANCELLED, "the client went away")

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise RpcAbort(code.value[0], details)


def _frame_request(frame: StreamFrame) -> InferRequestView:
    request = frame.request()
    assert request is not None  # a frame with a payload
    return request


def model_infer_inbound(stream: StreamCall) -> Inbound[InferRequestView]:
    return Inbound(stream, _frame_request)


def watch_inbound(stream: StreamCall) -> Inbound[health_pb2.HealthCheckRequest]:
    return Inbound(stream, lambda frame: health_pb2.HealthCheckRequest.FromString(frame.payload or b""))


StreamMessage = bytes | EncodedMessage


class NativeCodec:
    """The native core's requests (`InferRequestView`) and messages (encoded by the core where it can)."""

    def size(self, request: InferRequestView) -> int:
        return request.size

    def take_empty_final(self, request: InferRequestView) -> bool:
        """As `grpc_stream._take_empty_final` reads it from protobuf: a bool, removed from the parameters."""
        parameters = request.parameters
        if EMPTY_FINAL not in parameters:
            return False
        value = parameters.pop(EMPTY_FINAL)
        if not isinstance(value, bool):
            raise invalid(f"invalid value type for '{EMPTY_FINAL}' parameter, expected bool_param.")
        return value

    def decode(self, request: InferRequestView, shm: SharedMemoryRegistry) -> tuple[InferRequest, dict[str, str]]:
        return grpc_codec.decode_view(request, shm)

    async def response(self, request: InferRequestView, response: InferResponse, final: bool,
                       shm: SharedMemoryRegistry, refs: dict[str, ShmRef]) -> StreamMessage:
        return await sized(response_size(response), self.encode, response, final, shm, refs)

    def encode(self, response: InferResponse, final: bool, shm: SharedMemoryRegistry,
               refs: dict[str, ShmRef]) -> StreamMessage:
        """The message carrying `response`, on this thread: by the core where it writes the outputs as they are,
        else by Python's conversion (outputs in `refs` written to their shared memory)."""
        if not refs:
            encoded = StreamCall.encode_response(response, final)
            if encoded is not None:
                return encoded
        message = grpc_codec.encode_response(response, shm, refs)
        message.parameters[FINAL].bool_param = final
        data: bytes = pb.ModelStreamInferResponse(infer_response=message).SerializeToString()
        return data

    def bare(self, request: InferRequestView, final: bool) -> StreamMessage:
        return StreamCall.encode_bare(request.id, request.model_name, request.model_version, final)

    def error(self, request: InferRequestView, message: str, final: bool) -> StreamMessage:
        data: bytes = stream_error(request, message, final=final).SerializeToString()
        return data


async def answer_watch(stream: StreamCall, inbound: Inbound[Any], outlet: Outlet,
                       watch: Callable[[Any, StreamContext], Coroutine[Any, Any, None]],
                       stopping: asyncio.Event) -> None:
    """Health Watch: the servicer writes each status change until the client goes away or the server stops
    (UNAVAILABLE, so the stop does not wait for watchers)."""
    try:
        request = await anext(inbound)
    except RpcAbort as abort:
        stream.fail(abort.code, abort.details)
        return
    except StopAsyncIteration:
        stream.fail(INVALID_ARGUMENT, "the Watch call sent no request")
        return
    loop = asyncio.get_running_loop()
    watcher: asyncio.Task[None] = loop.create_task(watch(request, StreamContext(outlet)))
    gone = loop.create_task(inbound.failure())
    stop = loop.create_task(stopping.wait())
    try:
        await asyncio.wait({watcher, gone, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watcher, gone, stop):
            task.cancel()
        await asyncio.gather(watcher, gone, stop, return_exceptions=True)
    outcome = None if watcher.cancelled() else watcher.exception()
    if stopping.is_set():
        stream.fail(UNAVAILABLE, "the server is stopping")
    elif isinstance(outcome, RpcAbort):
        stream.fail(outcome.code, outcome.details)
    else:
        stream.close()
