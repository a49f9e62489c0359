"""ModelStreamInfer: the requests of one stream run concurrently and their responses go out as they come.

As Triton does, each request of a stream runs on its own (one task per request), its responses (one for a
plain model, zero or many for a decoupled one) are written as soon as they are ready and carry the request's
`id`, so a client matches them by id. At most `limit` requests of one stream are in flight: the stream is
not read further until one finishes, so a client cannot make the server start unbounded work. Responses
wait in a bounded queue for the client to read them.

Every streamed response carries Triton's `triton_final_response` parameter; a decoupled model's final flag
sent without a response becomes an empty response only when the request asked for it with
`triton_enable_empty_final_response` (a reserved parameter, not passed on to the model), as in Triton.

`answered`, when given, is called once per request after its last message was sent (the native core's stream ends
on a connection that gave way once the requests it read are answered). Each request's task writes its own
messages (`drive`: the native core's window waits for the client); grpcio's servicer takes them from a bounded
queue instead (`run`).

What a request is and what a message is belong to the front end (`StreamCodec`): under grpcio protobuf messages
both ways (`ProtobufCodec`); through the native core the core's decoded view in and its encoded messages out
(`native_stream.NativeCodec`), so no protobuf object is built on that path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from tritonclient.grpc import service_pb2 as pb

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import InferenceError, bounded, internal, invalid
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import grpc_codec
from ensemble_runtime.protocol.offload import response_size, sized
from ensemble_runtime.protocol.stream_gate import Gate
from ensemble_runtime.shared_memory import SharedMemoryRegistry, ShmRef, output_refs

EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
DEFAULT_LIMIT = 64
_DONE = object()


R = TypeVar("R")  # a request as the front end reads it
M = TypeVar("M")  # a message as it writes it
R_contra = TypeVar("R_contra", contravariant=True)
M_co = TypeVar("M_co", covariant=True)


class StreamCodec(Protocol[R_contra, M_co]):
    """A front end's requests and messages, for `StreamSession`. A request has `id`, `model_name` and
    `model_version`."""

    def size(self, request: R_contra) -> int:
        """Its size in bytes (whether decoding it goes to a thread)."""

    def take_empty_final(self, request: R_contra) -> bool:
        """Reads and removes `triton_enable_empty_final_response` (`InferenceError` if it is no bool)."""

    def decode(self, request: R_contra, shm: SharedMemoryRegistry) -> tuple[InferRequest, dict[str, str]]:
        """The request and its declared datatypes, as ModelInfer decodes them."""

    async def response(self, request: R_contra, response: InferResponse, final: bool, shm: SharedMemoryRegistry,
                       refs: dict[str, ShmRef]) -> M_co:
        """The message carrying one response (outputs in `refs` written to their shared memory)."""

    def bare(self, request: R_contra, final: bool) -> M_co:
        """A message with no response: the request's id, model name and version, and the final flag."""

    def error(self, request: R_contra, message: str, final: bool) -> M_co:
        """A message with an error for the request."""


class ProtobufCodec:
    """grpcio's: protobuf requests, protobuf messages."""

    def size(self, request: pb.ModelInferRequest) -> int:
        return int(request.ByteSize())

    def take_empty_final(self, request: pb.ModelInferRequest) -> bool:
        return _take_empty_final(request)

    def decode(self, request: pb.ModelInferRequest, shm: SharedMemoryRegistry) -> tuple[InferRequest, dict[str, str]]:
        return grpc_codec.decode_request(request, shm)

    async def response(self, request: pb.ModelInferRequest, response: InferResponse, final: bool,
                       shm: SharedMemoryRegistry, refs: dict[str, ShmRef]) -> pb.ModelStreamInferResponse:
        return await encode_streamed(response, final, shm, refs)

    def bare(self, request: pb.ModelInferRequest, final: bool) -> pb.ModelStreamInferResponse:
        response = _bare(request)
        response.parameters[FINAL].bool_param = final
        return pb.ModelStreamInferResponse(infer_response=response)

    def error(self, request: pb.ModelInferRequest, message: str, final: bool) -> pb.ModelStreamInferResponse:
        return stream_error(request, message, final=final)


class DirectPath(Protocol[R_contra]):
    """Requests of a stream answered without a task (`stream_direct.DirectStreams`)."""

    def take(self, request: R_contra, gate: Gate) -> bool:
        """On the loop: whether it answers `request` (then it leaves `gate` as the request ends, or gives it up
        when the client went away); False: nothing was done."""

    def stop(self) -> None:
        """On the loop: the stream ends; what it took and has not answered is cancelled."""


class StreamSession(Generic[R, M]):
    """One ModelStreamInfer call over the data plane."""

    def __init__(self, dataplane: DataPlane, codec: StreamCodec[R, M], limit: int = DEFAULT_LIMIT,
                 answered: Callable[[], None] | None = None) -> None:
        self._dp = dataplane
        self._codec = codec
        self._limit = max(1, limit)
        self._answered = answered

    async def drive(self, requests: AsyncIterator[R], send: Callable[[M], Awaitable[bool]],
                    direct: DirectPath[R] | None = None) -> None:
        """Reads `requests` here and answers each in a task of its own, which writes its messages with `send`
        (waiting while it waits: the client reads slowly) and then calls `answered`; or, where `direct` takes it,
        without a task (`stream_direct`). Returns once the requests ended and every one is answered, or as soon as
        `send` says the client is gone (False); raises what reading raised (a frame that does not decode), the
        requests in flight cancelled."""
        loop = asyncio.get_running_loop()
        gate = Gate(self._limit, loop)
        tasks: set[asyncio.Task[None]] = set()
        answered = self._answered

        async def answer(request: R) -> None:
            try:
                async with contextlib.aclosing(self._answer(request)) as messages:
                    async for message in messages:
                        if not await send(message):
                            gate.give_up()
                            return
                if answered is not None:
                    answered()
            finally:
                gate.leave()

        try:
            async for request in requests:
                if not await gate.enter():
                    return
                if direct is not None and direct.take(request, gate):
                    continue
                task = loop.create_task(answer(request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await gate.settled()  # a request that finds the client gone ends the rest
        finally:
            if direct is not None:
                direct.stop()
            pending = list(tasks)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def run(self, requests: AsyncIterator[R]) -> AsyncGenerator[M, None]:
        """`drive` as a generator of the messages (grpcio's servicer yields them): they wait in a bounded
        queue for the caller to take them."""
        out: asyncio.Queue[Any] = asyncio.Queue(maxsize=self._limit)
        failure: list[BaseException] = []

        async def put(message: M) -> bool:
            await out.put(message)
            return True

        async def drive() -> None:
            try:
                await self.drive(requests, put)
            except Exception as exc:  # the stream itself failed (a frame that does not decode): end it so
                failure.append(exc)
            await out.put(_DONE)  # not when cancelled: nobody takes it then, and a full queue would hold this

        driver = asyncio.get_running_loop().create_task(drive())
        try:
            while (message := await out.get()) is not _DONE:
                yield message
            if failure:
                raise failure[0]
        finally:
            driver.cancel()
            await asyncio.gather(driver, return_exceptions=True)

    async def _answer(self, request: R) -> AsyncGenerator[M, None]:
        """The stream messages for one request: its responses, or an error message naming what went wrong."""
        codec = self._codec
        try:
            empty_final = codec.take_empty_final(request)
            shm = self._dp.shared_memory  # inputs and outputs may live in registered regions, as in ModelInfer
            decoded, declared = await sized(codec.size(request), codec.decode, request, shm)
            refs = output_refs(decoded.output_parameters)
            async with contextlib.aclosing(self._dp.infer_stream(decoded, declared)) as responses:
                async for item in responses:
                    if item.error is not None:
                        yield codec.error(request, item.error.message, item.final)
                    elif item.response is not None:
                        yield await codec.response(request, item.response, item.final, shm, refs)
                    elif empty_final:
                        yield codec.bare(request, item.final)
        except InferenceError as exc:
            yield codec.error(request, exc.message, True)
        except Exception as exc:
            yield codec.error(request, str(internal(f"{type(exc).__name__}: {exc}")), True)


def _take_empty_final(request: pb.ModelInferRequest) -> bool:
    """Read and remove the reserved `triton_enable_empty_final_response` parameter (a bool, as in Triton)."""
    if EMPTY_FINAL not in request.parameters:
        return False
    value = request.parameters[EMPTY_FINAL]
    if value.WhichOneof("parameter_choice") != "bool_param":
        raise invalid(f"invalid value type for '{EMPTY_FINAL}' parameter, expected bool_param.")
    enabled = bool(value.bool_param)
    del request.parameters[EMPTY_FINAL]
    return enabled


async def encode_streamed(response: InferResponse, final: bool, shm: SharedMemoryRegistry | None = None,
                          refs: dict[str, ShmRef] | None = None) -> pb.ModelStreamInferResponse:
    """The protobuf message carrying `response` with its final flag (encoded in a thread when large)."""
    size = response_size(response)
    message = await sized(size, grpc_codec.encode_response, response, shm, refs)
    message.parameters[FINAL].bool_param = final
    return pb.ModelStreamInferResponse(infer_response=message)


def _bare(request: Any) -> pb.ModelInferResponse:
    return pb.ModelInferResponse(id=request.id, model_name=request.model_name, model_version=request.model_version)


def stream_error(request: Any, message: str, *, final: bool) -> pb.ModelStreamInferResponse:
    """An error message for a request (anything with its `id`, `model_name` and `model_version`)."""
    response = _bare(request)
    response.parameters[FINAL].bool_param = final
    return pb.ModelStreamInferResponse(error_message=bounded(message), infer_response=response)
