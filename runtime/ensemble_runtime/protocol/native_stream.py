"""ModelStreamInfer through the native core: its raw frames feed the same `StreamSession` the grpcio front end
runs. The session pulls requests (one `want` per request it reads), so its in-flight limit still bounds how
much of the stream the core reads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from tritonclient.grpc import service_pb2 as pb

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import bounded
from ensemble_runtime.protocol._native import StreamCall, StreamFrame
from ensemble_runtime.protocol.grpc_stream import StreamSession
from ensemble_runtime.protocol.native_calls import CANCELLED, INTERNAL, INVALID_ARGUMENT, RpcAbort

log = logging.getLogger(__name__)


class Inbound:
    """The requests of one stream, as the frames the core reads come in (`deliver`)."""

    def __init__(self, stream: StreamCall) -> None:
        self._stream = stream
        self._frames: asyncio.Queue[StreamFrame] = asyncio.Queue()

    def deliver(self, frame: StreamFrame) -> None:
        self._frames.put_nowait(frame)

    def __aiter__(self) -> AsyncIterator[pb.ModelInferRequest]:
        return self

    async def __anext__(self) -> pb.ModelInferRequest:
        self._stream.want()
        frame = await self._frames.get()
        payload = frame.payload
        if payload is None:
            if frame.code == 0:
                raise StopAsyncIteration
            raise RpcAbort(frame.code, frame.message)
        try:
            return pb.ModelInferRequest.FromString(payload)
        except Exception as exc:  # the answer decode_guard gives under grpcio
            raise RpcAbort(INVALID_ARGUMENT, "the ModelStreamInfer request is not a valid protobuf message "
                                             f"({type(exc).__name__})") from exc


async def answer_stream(stream: StreamCall, inbound: Inbound, dataplane: DataPlane, limit: int) -> None:
    """Runs the stream's session; its messages go out as they come, then the stream ends with its status."""
    try:
        async for message in StreamSession(dataplane, limit).run(inbound):
            if not stream.send(message.SerializeToString()):
                break  # the client went away
    except RpcAbort as abort:
        stream.fail(abort.code, abort.details)
        return
    except asyncio.CancelledError:
        stream.fail(CANCELLED, "the server is stopping")
        raise
    except Exception as exc:
        log.exception("unexpected error in ModelStreamInfer")
        stream.fail(INTERNAL, bounded(f"internal error: {type(exc).__name__}: {exc}"))
        return
    stream.close()
