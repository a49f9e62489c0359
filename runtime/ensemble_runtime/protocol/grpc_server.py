"""The KServe v2 / Triton gRPC service and the standard gRPC health service, over the data plane (and the
repository plane for the repository RPCs)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import ErrorCode, InferenceError, bounded
from ensemble_runtime.grpc_tls import GrpcTls
from ensemble_runtime.log_settings import LogControl
from ensemble_runtime.protocol import grpc_codec
from ensemble_runtime.protocol import shared_memory_api as shm_api
from ensemble_runtime.protocol._native import check_tls
from ensemble_runtime.protocol.decode_guard import add_guarded
from ensemble_runtime.protocol.grpc_stream import DEFAULT_LIMIT as DEFAULT_STREAM_LIMIT
from ensemble_runtime.protocol.grpc_stream import ProtobufCodec, StreamSession
from ensemble_runtime.protocol.offload import response_size, sized
from ensemble_runtime.protocol.restricted import RestrictionInterceptor
from ensemble_runtime.repository_plane import RepositoryPlane
from ensemble_runtime.restrictions import Restrictions
from ensemble_runtime.settings import GrpcConnections
from ensemble_runtime.shared_memory import output_refs
from ensemble_runtime.traces import grpc_values

log = logging.getLogger(__name__)
T = TypeVar("T")
SERVICE = "inference.GRPCInferenceService"


async def _guard(context: grpc.aio.ServicerContext[Any, Any], call: Callable[[], Awaitable[T]]) -> T:
    """Run a handler; turn InferenceError into the gRPC status Triton uses, and anything else into INTERNAL."""
    try:
        return await call()
    except InferenceError as exc:
        await context.abort(grpc.StatusCode[exc.code.name], bounded(exc.message))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("unexpected error in gRPC handler")
        await context.abort(grpc.StatusCode.INTERNAL, bounded(f"internal error: {type(exc).__name__}: {exc}"))
    raise AssertionError("unreachable")


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(
        self, dataplane: DataPlane, repository: RepositoryPlane, stream_limit: int = DEFAULT_STREAM_LIMIT,
        logs: LogControl | None = None,
    ) -> None:
        self._dp = dataplane
        self._repo = repository
        self._stream_limit = stream_limit  # requests of one ModelStreamInfer in flight at once
        self._logs = logs  # the logging extension (None: not served here)

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._dp.live())

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._dp.ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        async def run() -> pb.ModelReadyResponse:
            return pb.ModelReadyResponse(ready=self._dp.model_ready(request.name, request.version))

        return await _guard(context, run)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        name, version, extensions = self._dp.server_metadata()
        return pb.ServerMetadataResponse(name=name, version=version, extensions=list(extensions))

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        async def run() -> pb.ModelMetadataResponse:
            lv = self._dp.model_version(request.name, request.version)
            rec = self._dp.registry.records[request.name]
            return grpc_codec.model_metadata(self._dp.signature(lv), lv.config, [str(v) for v in rec.served])

        return await _guard(context, run)

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> pb.ModelConfigResponse:
        async def run() -> pb.ModelConfigResponse:
            return pb.ModelConfigResponse(config=self._dp.model_config(request.name, request.version))

        return await _guard(context, run)

    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Any) -> pb.ModelStatisticsResponse:
        async def run() -> pb.ModelStatisticsResponse:
            versions = self._dp.statistics(request.name, request.version)
            return pb.ModelStatisticsResponse(
                model_stats=[grpc_codec.model_statistics(lv.model, lv.version, lv.stats) for lv in versions]
            )

        return await _guard(context, run)

    async def LogSettings(self, request: pb.LogSettingsRequest, context: Any) -> pb.LogSettingsResponse:
        """Triton's logging extension: the settings, after the request's changes (none: as they are)."""

        async def run() -> pb.LogSettingsResponse:
            if self._logs is None:
                raise InferenceError(ErrorCode.UNIMPLEMENTED, "the logging extension is not served here")
            changes = grpc_codec.log_setting_values(request)
            settings = self._logs.update(changes, null_keeps=False) if changes else self._logs.settings
            return grpc_codec.log_settings_response(settings)

        return await _guard(context, run)

    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Any) -> pb.TraceSettingResponse:
        """Triton's trace extension: the settings (global, or `model_name`'s), after the request's changes."""

        async def run() -> pb.TraceSettingResponse:
            changes = grpc_values({name: list(v.value) for name, v in request.settings.items()})
            settings = self._dp.trace_settings(request.model_name, changes)
            response = pb.TraceSettingResponse()
            for name, value in settings.as_dict().items():
                response.settings[name].value.extend(value if isinstance(value, list) else [value])
            return response

        return await _guard(context, run)

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Any) -> pb.RepositoryIndexResponse:
        entries = self._repo.repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(name=e.name, version=e.version, state=e.state, reason=e.reason)
                for e in entries
            ]
        )

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        async def run() -> pb.RepositoryModelLoadResponse:
            self._repo.require_repository_control()
            override = None
            if "config" in request.parameters:
                override = request.parameters["config"].string_param
            if any(key.startswith("file:") for key in request.parameters):
                raise InferenceError(ErrorCode.UNIMPLEMENTED, "loading model files through the load request is not supported")
            await self._repo.load(request.model_name, override)
            return pb.RepositoryModelLoadResponse()

        return await _guard(context, run)

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        async def run() -> pb.RepositoryModelUnloadResponse:
            self._repo.require_repository_control()
            await self._repo.unload(request.model_name)
            return pb.RepositoryModelUnloadResponse()

        return await _guard(context, run)

    async def _infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
        """Decode (in a thread when large), run, encode (in a thread when large)."""
        shm = self._dp.shared_memory
        decoded, declared = await sized(request.ByteSize(), grpc_codec.decode_request, request, shm)
        response = await self._dp.infer(decoded, declared)
        size = response_size(response)
        return await sized(size, grpc_codec.encode_response, response, shm, output_refs(decoded.output_parameters))

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        return await _guard(context, lambda: self._infer(request))

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> Any:
        async for message in StreamSession(self._dp, ProtobufCodec(), self._stream_limit).run(request_iterator):
            yield message


    # ---- shared memory (protocol/shared_memory_api.py) ------------------------------------------------------
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return await _guard(context, _now(shm_api.grpc_system_status, self._dp.shared_memory, request))

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        return await _guard(context, _now(shm_api.grpc_system_register, self._dp.shared_memory, request))

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return await _guard(context, _now(shm_api.grpc_system_unregister, self._dp.shared_memory, request))

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return await _guard(context, _now(shm_api.grpc_cuda_status, self._dp.shared_memory, request))

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        return await _guard(context, _now(shm_api.grpc_cuda_register, self._dp.shared_memory, request))

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return await _guard(context, _now(shm_api.grpc_cuda_unregister, self._dp.shared_memory, request))


def _now(call: Callable[..., T], *args: Any) -> Callable[[], Awaitable[T]]:
    """`call(*args)` as the coroutine factory `_guard` takes."""

    async def run() -> T:
        return call(*args)

    return run


class _ProbedHealthServicer(HealthServicer):  # type: ignore[misc]
    """`Check` for the server and the inference service asks the data plane now (what /v2/health/ready
    answers), so the two never disagree; `Watch` follows the periodic updates."""

    def __init__(self) -> None:
        super().__init__()
        self.probe: Callable[[], bool] | None = None

    async def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> object:
        if self.probe is not None and request.service in ("", SERVICE):
            ready = self.probe()
            return health_pb2.HealthCheckResponse(
                status=health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
            )
        return await super().Check(request, context)


class Health:
    """The standard grpc.health.v1 service; SERVING overall and for the inference service iff the server is ready."""

    def __init__(self) -> None:
        self.servicer = _ProbedHealthServicer()

    def follow(self, ready: Callable[[], bool]) -> None:
        self.servicer.probe = ready

    async def update(self, ready: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        await self.servicer.set("", status)
        await self.servicer.set(SERVICE, status)


def build_grpc_server(
    dataplane: DataPlane, repository: RepositoryPlane, health: Health, max_message_bytes: int,
    restrictions: Restrictions | None = None, stream_limit: int = DEFAULT_STREAM_LIMIT,
    connections: GrpcConnections | None = None, logs: LogControl | None = None,
) -> grpc.aio.Server:
    """`restrictions`: categories that need a metadata header (--grpc-restricted-protocol); none by default.
    `connections`: the handshake and keepalive limits and the number of connections, as the native core keeps them
    (idle connections are pinged too); Triton's defaults if None. Not the concurrent streams: grpc core's server
    applies a limit only once the client has acknowledged it, and refuses (UNAVAILABLE) the calls a client opened
    before that; nor the budgets of incomplete calls and open streams, which grpc core has no option for."""
    connections = connections or GrpcConnections()
    server = grpc.aio.server(
        interceptors=[RestrictionInterceptor(restrictions)] if restrictions and restrictions.by_category else [],
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
            ("grpc.server_handshake_timeout_ms", round(connections.handshake_secs * 1000)),
            ("grpc.keepalive_time_ms", connections.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", connections.keepalive_timeout_ms),
            ("grpc.http2.ping_timeout_ms", connections.keepalive_timeout_ms),  # grpcio 1.85 waits on this one
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.max_allowed_incoming_connections", connections.max_connections),
            *_max_age(connections.max_age_secs, connections.max_age_grace_secs),
        ]
    )
    servicer = InferenceServicer(dataplane, repository, stream_limit, logs)
    add_guarded(server, service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server, servicer)
    health.follow(dataplane.ready)
    add_guarded(server, health_pb2_grpc.add_HealthServicer_to_server, health.servicer)
    return server


def _max_age(secs: int, grace_secs: int) -> list[tuple[str, int]]:
    """grpc core's options for a maximum connection age (none for 0): the calls of a connection that reached it
    have as long as they need, its streams `grace_secs` (0: as long as they need), as on the native front end."""
    if not secs:
        return []
    return [("grpc.max_connection_age_ms", secs * 1000),
            ("grpc.max_connection_age_grace_ms", grace_secs * 1000 if grace_secs else 2**31 - 1)]


class GrpcioTls:
    """grpcio's credentials for `tls`: its certificate and key, and a client certificate the roots signed required
    for mutual TLS; `renew` hands grpc core renewed files, which it takes at its next handshake. The files are
    checked by the native core's rules (grpc core would only fail the handshakes): ValueError naming what is
    wrong."""

    def __init__(self, tls: GrpcTls) -> None:
        check(tls)
        self._mutual = tls.mutual
        self._next: grpc.ServerCertificateConfiguration | None = None
        self._handing = threading.Lock()  # `renew` on the event loop's thread, `_fetch` on grpc core's
        self.credentials = grpc.dynamic_ssl_server_credentials(_configuration(tls), self._fetch,
                                                               require_client_authentication=tls.mutual)

    def renew(self, tls: GrpcTls) -> None:
        if tls.mutual != self._mutual:
            raise ValueError("mutual TLS cannot be turned on or off by renewed files")
        check(tls)
        with self._handing:
            self._next = _configuration(tls)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc core asks at each handshake (on its own thread): the renewed files once, else None (no change)."""
        with self._handing:
            renewed, self._next = self._next, None
        return renewed


def check(tls: GrpcTls) -> None:
    """ValueError naming what is wrong with `tls`'s files, by the rules the native core serves them by."""
    check_tls(tls.pem)


def _configuration(tls: GrpcTls) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(tls.private_key, tls.certificate_chain)],
                                                     root_certificates=tls.client_roots)
