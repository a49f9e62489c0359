"""ModelStreamInfer: the requests of one stream run concurrently and their responses go out as they come.

As Triton does, each request of a stream runs on its own (one task per request), its responses (one for a
plain model, zero or many for a decoupled one) are written as soon as they are ready and carry the request's
`id`, so a client matches them by id. At most `limit` requests of one stream are in flight: the stream is
not read further until one finishes, so a client cannot make the server start unbounded work. Responses
wait in a bounded queue for the client to read them.

Every streamed response carries Triton's `triton_final_response` parameter; a decoupled model's final flag
sent without a response becomes an empty response only when the request asked for it with
`triton_enable_empty_final_response` (a reserved parameter, not passed on to the model), as in Triton.

`answered`, when given, is called once per request after its last message was taken from the session (the native
core's stream ends on a connection that gave way once the requests it read are answered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import InferenceError, bounded, internal, invalid
from ensemble_runtime.protocol import grpc_codec
from ensemble_runtime.protocol.offload import sized
from ensemble_runtime.responses import StreamResponse
from ensemble_runtime.shared_memory import SharedMemoryRegistry, ShmRef, output_refs

EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
DEFAULT_LIMIT = 64
_DONE = object()
_ANSWERED = object()  # follows a request's last message


class StreamSession:
    """One ModelStreamInfer call over the data plane."""

    def __init__(self, dataplane: DataPlane, limit: int = DEFAULT_LIMIT,
                 answered: Callable[[], None] | None = None) -> None:
        self._dp = dataplane
        self._limit = max(1, limit)
        self._answered = answered

    async def run(
        self, requests: AsyncIterator[pb.ModelInferRequest]
    ) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[Any] = asyncio.Queue(maxsize=self._limit)
        slots = asyncio.Semaphore(self._limit)
        tasks: set[asyncio.Task[None]] = set()
        failure: list[BaseException] = []
        answered = self._answered

        async def answer(request: pb.ModelInferRequest) -> None:
            try:
                async with contextlib.aclosing(self._answer(request)) as messages:
                    async for message in messages:
                        await out.put(message)
                if answered is not None:
                    await out.put(_ANSWERED)
            finally:
                slots.release()

        async def read() -> None:
            try:
                async for request in requests:
                    await slots.acquire()
                    task = loop.create_task(answer(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                while tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
            except Exception as exc:  # the stream itself failed (a frame that does not decode): end it so
                failure.append(exc)
            finally:
                await out.put(_DONE)

        reader = loop.create_task(read())
        try:
            while True:
                message = await out.get()
                if message is _DONE:
                    break
                if message is _ANSWERED:
                    if answered is not None:
                        answered()
                    continue
                yield message
            if failure:
                raise failure[0]
        finally:
            pending = [reader, *tasks]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _answer(self, request: pb.ModelInferRequest) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
        """The stream messages for one request: its responses, or an error message naming what went wrong."""
        try:
            empty_final = _take_empty_final(request)
            shm = self._dp.shared_memory  # inputs and outputs may live in registered regions, as in ModelInfer
            decoded, declared = await sized(request.ByteSize(), grpc_codec.decode_request, request, shm)
            refs = output_refs(decoded.output_parameters)
            async with contextlib.aclosing(self._dp.infer_stream(decoded, declared)) as responses:
                async for item in responses:
                    message = await _message(request, item, empty_final, shm, refs)
                    if message is not None:
                        yield message
        except InferenceError as exc:
            yield _error(request, exc.message, final=True)
        except Exception as exc:
            yield _error(request, str(internal(f"{type(exc).__name__}: {exc}")), final=True)


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


async def _message(
    request: pb.ModelInferRequest,
    item: StreamResponse,
    empty_final: bool,
    shm: SharedMemoryRegistry | None = None,
    refs: dict[str, ShmRef] | None = None,
) -> pb.ModelStreamInferResponse | None:
    if item.error is not None:
        return _error(request, item.error.message, final=item.final)
    if item.response is None:
        if not empty_final:
            return None
        response = _bare(request)
    else:
        size = sum(int(array.nbytes) for array in item.response.outputs.values())
        response = await sized(size, grpc_codec.encode_response, item.response, shm, refs)
    response.parameters[FINAL].bool_param = item.final
    return pb.ModelStreamInferResponse(infer_response=response)


def _bare(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    return pb.ModelInferResponse(id=request.id, model_name=request.model_name, model_version=request.model_version)


def _error(request: pb.ModelInferRequest, message: str, *, final: bool) -> pb.ModelStreamInferResponse:
    response = _bare(request)
    response.parameters[FINAL].bool_param = final
    return pb.ModelStreamInferResponse(error_message=bounded(message), infer_response=response)
