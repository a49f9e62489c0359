"""The native gRPC front end (`--grpc-frontend=native`): the Rust core (ensemble_runtime.protocol._native) serves
inference.GRPCInferenceService and grpc.health.v1.Health on the gRPC port, checks restrictions and message
sizes, decodes ModelInfer, and queues every call; the event loop is woken once per batch of arrived calls
(`add_reader` on the core's descriptor) and starts one task per call, except for a ModelInfer the data plane
runs without one (`begin_infer`). ModelStreamInfer's frames are handed over
raw to the grpcio front end's StreamSession, health Watch to the health servicer's Watch."""

from __future__ import annotations

import asyncio
from typing import Any

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.grpc_tls import GrpcTls
from ensemble_runtime.log_settings import LogControl
from ensemble_runtime.protocol._native import GrpcCore, StreamCall, StreamFrame, StreamWritable
from ensemble_runtime.protocol.grpc_server import Health, InferenceServicer
from ensemble_runtime.protocol.grpc_stream import DEFAULT_LIMIT as DEFAULT_STREAM_LIMIT
from ensemble_runtime.protocol.native_calls import answer_forwarded, begin_infer, forwarded_routes
from ensemble_runtime.protocol.native_stream import (
    Inbound,
    Outlet,
    answer_watch,
    model_infer_inbound,
    watch_inbound,
)
from ensemble_runtime.protocol.on_loop import LoopDriver, drive
from ensemble_runtime.protocol.restricted import GRPC_CATEGORIES
from ensemble_runtime.protocol.stream_direct import answer_stream
from ensemble_runtime.repository_plane import RepositoryPlane
from ensemble_runtime.restrictions import Restrictions
from ensemble_runtime.settings import GrpcConnections

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
_STREAM_ITEMS = (StreamFrame, StreamWritable)  # (a tuple made once: `A | B` makes a union per call)


def restricted_methods(restrictions: Restrictions | None) -> list[tuple[str, str, str, str]]:
    """(method path, header, value, refusal) for each method in a restricted category."""
    out: list[tuple[str, str, str, str]] = []
    for path, category in GRPC_CATEGORIES.items():
        restriction = restrictions.get(category) if restrictions is not None else None
        if restriction is not None:
            out.append((path, restriction.header, restriction.value, restriction.refusal("protocol")))
    return out


def new_core(max_message_bytes: int, restricted: list[tuple[str, str, str, str]], threads: int,
             connections: GrpcConnections, tls: GrpcTls | None = None) -> GrpcCore:
    """The core, its connections treated as `connections` says, over TLS with `tls` (ValueError: what is wrong
    with its files)."""
    files = None if tls is None else tls.pem
    return GrpcCore(max_message_bytes, restricted, threads,
                    handshake_timeout=connections.handshake_secs,
                    keepalive_time=connections.keepalive_time_ms / 1000,
                    keepalive_timeout=connections.keepalive_timeout_ms / 1000,
                    max_concurrent_streams=connections.max_concurrent_streams,
                    max_connections=connections.max_connections,
                    max_incomplete_calls=connections.max_incomplete_calls,
                    max_open_streams=connections.max_open_streams,
                    send_timeout=connections.send_timeout_secs,
                    max_connection_age=connections.max_age_secs,
                    max_connection_age_grace=connections.max_age_grace_secs,
                    tls=files)


class NativeGrpcServer:
    def __init__(
        self, dataplane: DataPlane, repository: RepositoryPlane, health: Health, max_message_bytes: int,
        restrictions: Restrictions | None = None, threads: int = 1, stream_limit: int = DEFAULT_STREAM_LIMIT,
        connections: GrpcConnections | None = None, logs: LogControl | None = None, tls: GrpcTls | None = None,
    ) -> None:
        connections = connections or GrpcConnections()  # None: Triton's defaults
        self._dp = dataplane
        self._stream_limit = stream_limit
        self._streams: dict[int, tuple[Inbound[Any], Outlet]] = {}
        self._health = health
        health.follow(dataplane.ready)
        self._routes = forwarded_routes(InferenceServicer(dataplane, repository, logs=logs), health.servicer)
        self._core = new_core(max_message_bytes, restricted_methods(restrictions), threads, connections, tls)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()  # ends health Watch streams at stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._driver: LoopDriver | None = None  # threads 0: the loop's thread drives the core

    def renew_tls(self, tls: GrpcTls) -> None:
        """Serves the connections accepted from now on with renewed files (ValueError: what is wrong with them)."""
        self._core.renew_tls(tls.pem)

    def start(self, address: str, port: int) -> int:
        """Serve on `address:port` (0: any free port); returns the port."""
        loop = asyncio.get_running_loop()
        bound = self._core.start(address, port)
        loop.add_reader(self._core.fileno(), self._drain)
        self._loop = loop
        self._driver = drive(loop, self._core, self._drain)
        return bound

    def _drain(self) -> None:
        """One wake-up (or, for a core the loop drives, calls its turn read): every call waiting, one task each."""
        assert self._loop is not None
        for item in self._core.take():
            if isinstance(item, _STREAM_ITEMS):
                self._deliver(item)
                continue
            if isinstance(item, StreamCall):
                work = self._stream(item)
            elif item.method == MODEL_INFER:
                begun = begin_infer(item, self._dp)
                if begun is None:  # taken without a task (or refused)
                    continue
                work = begun
            else:
                work = answer_forwarded(item, self._routes)
            task = self._loop.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _deliver(self, item: StreamFrame | StreamWritable) -> None:
        link = self._streams.get(item.id)
        if link is None:
            return
        inbound, outlet = link
        if isinstance(item, StreamWritable):
            outlet.writable()
            return
        if item.payload is None and item.code != 0:  # the client went away: a waiting writer stops too
            outlet.gone()
        inbound.deliver(item)

    async def _stream(self, stream: StreamCall) -> None:
        outlet = Outlet(stream)
        try:
            if stream.method == HEALTH_WATCH:
                watching = watch_inbound(stream)
                self._streams[stream.id] = (watching, outlet)
                await answer_watch(stream, watching, outlet, self._health.servicer.Watch, self._stopping)
            else:
                requests = model_infer_inbound(stream)
                self._streams[stream.id] = (requests, outlet)
                await answer_stream(stream, requests, outlet, self._dp, self._stream_limit)
        finally:
            del self._streams[stream.id]

    async def stop(self, grace: float) -> None:
        """Stop taking calls; those in flight are answered for up to `grace` seconds (health Watch ends now)."""
        self._stopping.set()
        if self._driver is not None:
            await self._driver.stop(grace)
            self._driver = None
        else:
            await asyncio.to_thread(self._core.stop, grace)
        if self._loop is not None:
            self._loop.remove_reader(self._core.fileno())
            self._loop = None
        for task in list(self._tasks):
            task.cancel()
