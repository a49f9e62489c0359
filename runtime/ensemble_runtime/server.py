"""Wiring and lifecycle: build the data and repository planes, start transports, load models, poll, drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from aiohttp import web

from ensemble_runtime.backends.base import Backend
from ensemble_runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from ensemble_runtime.backends.ort_options import usable_cpus
from ensemble_runtime.backends.python.backend import PythonBackend
from ensemble_runtime.backends.tensorrt_backend import TensorRTBackend
from ensemble_runtime.config.config_files import ConfigFiles
from ensemble_runtime.custom_metrics import CustomMetrics
from ensemble_runtime.dataplane import BLS_ENDPOINT, DataPlane
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.gpu.gauges import GpuGauges, make_gpu_gauges
from ensemble_runtime.gpu.memory import make_device_free
from ensemble_runtime.grpc_tls import GrpcTls
from ensemble_runtime.host_metrics import HostSampler
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.load_journal import JOURNAL_FILENAME, LoadJournal
from ensemble_runtime.log_settings import LogControl
from ensemble_runtime.memory import MemoryBudget, MemoryPolicy
from ensemble_runtime.metrics import SERVER_METRIC_NAMES, build_metrics_registry
from ensemble_runtime.model_manager import ModelManager
from ensemble_runtime.protocol.grpc_server import GrpcioTls, Health, build_grpc_server
from ensemble_runtime.protocol.http_server import build_http_app, start_http
from ensemble_runtime.protocol.metrics_http import build_metrics_app
from ensemble_runtime.protocol.native_grpc import NativeGrpcServer
from ensemble_runtime.protocol.native_http import NativeHttpServer
from ensemble_runtime.protocol.on_loop import ON_LOOP, native_threads
from ensemble_runtime.python_gc import PythonGc
from ensemble_runtime.registry import Registry
from ensemble_runtime.repository.config_source import RepositoryConfigSource
from ensemble_runtime.repository.s3 import S3Settings
from ensemble_runtime.repository.sources import S3Source, no_deaths
from ensemble_runtime.repository_plane import RepositoryPlane
from ensemble_runtime.response_cache import ResponseCache
from ensemble_runtime.response_caching import Caching
from ensemble_runtime.responses import StreamResponse
from ensemble_runtime.settings import ControlMode, GrpcFrontend, HttpFrontend, RuntimeSettings
from ensemble_runtime.storage import Source, Storage
from ensemble_runtime.tls_watch import TlsWatch
from ensemble_runtime.traces import TraceControl
from ensemble_runtime.tracing import Tracing
from ensemble_runtime.version_loader import VersionLoader

log = logging.getLogger(__name__)
class StartError(Exception):
    """The runtime cannot start as its flags ask (a TLS file whose contents are not what they should be): the
    message says which and why; `ensemble-runtime` writes it and exits 1."""


# Said at start when grpcio's server takes the gRPC port: it has none of the native core's answers to HTTP/2's
# floods (README: "The native front ends").
GRPCIO_UNHARDENED = ("--grpc-frontend=grpcio: grpcio's server is not hardened against HTTP/2 floods (a rapid reset "
                     "takes its CPU and fails other clients' calls); serve clients you do not trust with the "
                     "native front end (the default)")


def default_backends(cpus: int = 0) -> dict[str, Backend]:
    """The backends; `cpus`: the CPU limit ONNX Runtime's pools are sized for (0: the process's affinity)."""
    return {"onnxruntime": OnnxRuntimeBackend(cpus=cpus), "python": PythonBackend(), "tensorrt": TensorRTBackend()}


def build_sources(settings: RuntimeSettings, cache: Path, journal: LoadJournal | None = None) -> list[Source]:
    """One cached source per s3:// repository, and one for the operator's repository config file. With a
    load journal, a version that killed an earlier process is kept with the versions to fall back on."""
    s3 = S3Settings(endpoint_url=settings.s3_endpoint_url, region=settings.s3_region)
    died = journal.died_versions if journal is not None else no_deaths
    sources: list[Source] = [
        S3Source(uri, cache / f"s3-{index}", s3, settle_secs=settings.repository_settle_secs, died_versions=died)
        for index, uri in enumerate(r for r in settings.model_repositories if r.startswith("s3://"))
    ]
    if settings.repository_config is not None:
        sources.append(RepositoryConfigSource(settings.repository_config, cache / "config", s3,
                                              settle_secs=settings.repository_settle_secs, died_versions=died))
    return sources


def build_journal(settings: RuntimeSettings) -> LoadJournal | None:
    """The load journal: --load-journal, else one in --model-cache-dir (a temporary cache dir would not
    outlive the process, so without either there is none)."""
    if settings.load_journal is not None:
        return LoadJournal(settings.load_journal)
    if settings.model_cache_dir is not None:
        return LoadJournal(settings.model_cache_dir / JOURNAL_FILENAME)
    return None


@dataclass(frozen=True, slots=True)
class Planes:
    """What the transports call: `data` for inference, health, metadata and statistics, `repository` for the
    model repository extension and the storage status, `custom_metrics` for the families models define."""

    data: DataPlane
    repository: RepositoryPlane
    custom_metrics: CustomMetrics | None = None


def build_dataplane(settings: RuntimeSettings, backends: dict[str, Backend]) -> DataPlane:
    """The data plane alone (its manager loads models), as the in-process benchmarks drive it."""
    return build_planes(settings, backends).data


def build_planes(settings: RuntimeSettings, backends: dict[str, Backend]) -> Planes:
    registry = Registry()
    holder: list[DataPlane] = []

    async def call_model(request: InferRequest) -> InferResponse:  # BLS: in-process, no network hop
        return await holder[0].infer(request, endpoint=BLS_ENDPOINT)

    def stream_model(request: InferRequest) -> AsyncIterator[StreamResponse]:  # BLS exec(decoupled=True)
        return holder[0].infer_stream(request)

    cache = settings.model_cache_dir or Path(tempfile.mkdtemp(prefix="ensemble-runtime-cache-"))
    journal = build_journal(settings)
    storage = Storage(build_sources(settings, cache, journal), registry)
    roots = [Path(r) for r in settings.model_repositories if "://" not in r] + storage.roots
    budget = MemoryBudget(settings.memory_budget_bytes, settings.memory_factor, MemoryPolicy(settings.memory_policy))
    custom_metrics = CustomMetrics(reserved=SERVER_METRIC_NAMES)
    loader = VersionLoader(backends=backends, caller=call_model, cache_dir=cache, budget=budget,
                           device_free=make_device_free(os.environ), journal=journal,
                           timeout_secs=settings.model_load_timeout_secs, max_instances=settings.max_instances_per_model,
                           stream_caller=stream_model, custom_metrics=custom_metrics)

    async def sync_before_load(names: Collection[str]) -> None:
        await storage.sync(names, settle=True)

    manager = ModelManager(roots=roots, registry=registry, loader=loader, configs=ConfigFiles(settings.max_config_bytes),
                           before_load=sync_before_load if storage.sources else None,
                           uploading=storage.awaited_versions if storage.sources else None,
                           declared=storage.declared_models, explicit=settings.control_mode == ControlMode.EXPLICIT)
    cache_bytes = settings.response_cache_bytes()
    dataplane = DataPlane(registry=registry, manager=manager, strict_readiness=settings.strict_readiness,
                          server_name=settings.server_name, tracing=Tracing(TraceControl(settings.trace_settings())),
                          caching=Caching(ResponseCache(cache_bytes)) if cache_bytes is not None else None)
    repository = RepositoryPlane(manager=manager, storage=storage,
                                 repository_control=settings.control_mode == ControlMode.EXPLICIT)
    holder.append(dataplane)
    return Planes(dataplane, repository, custom_metrics)


METRICS_BODY_BYTES = 64 * 1024  # the metrics core's infer limits: unused, as it forwards every request

@dataclass
class Server:
    settings: RuntimeSettings
    planes: Planes
    health: Health = field(default_factory=Health)
    logs: LogControl | None = None  # the logging extension's live settings (None: not served)
    _grpc: grpc.aio.Server | None = None
    _native_grpc: NativeGrpcServer | None = None
    _native_http: NativeHttpServer | None = None
    _native_metrics: NativeHttpServer | None = None
    _gpu_gauges: GpuGauges | None = None
    _runners: list[web.AppRunner] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def dataplane(self) -> DataPlane:
        return self.planes.data

    def _core_threads(self, configured: int | None) -> int:
        return native_threads(configured, usable_cpus(len(os.sched_getaffinity(0)), self.settings.cpus), ON_LOOP)

    async def start(self) -> None:
        s = self.settings
        self.dataplane.started = False  # not ready before the initial load has finished
        python_gc = PythonGc(s.python_gc)
        tls = s.grpc_tls() if s.allow_grpc else None
        renew: Callable[[GrpcTls], None] | None = None  # how the gRPC port takes renewed TLS files
        if s.allow_grpc and s.grpc_frontend == GrpcFrontend.NATIVE:
            try:
                self._native_grpc = NativeGrpcServer(self.dataplane, self.planes.repository, self.health,
                                                     s.grpc_max_message_bytes, s.grpc_restrictions(),
                                                     threads=self._core_threads(s.grpc_native_threads),
                                                     stream_limit=s.grpc_stream_max_in_flight,
                                                     connections=s.grpc_connections(), logs=self.logs, tls=tls)
            except ValueError as exc:  # the flags' values were checked: what remains is what the TLS files hold
                raise StartError(f"{tls.flag if tls else 'gRPC'}: {exc}") from None
            self._native_grpc.start(s.grpc_address, s.grpc_port)
            renew = self._native_grpc.renew_tls
        elif s.allow_grpc:
            log.warning(GRPCIO_UNHARDENED)
            self._grpc = build_grpc_server(self.dataplane, self.planes.repository, self.health,
                                           s.grpc_max_message_bytes, s.grpc_restrictions(),
                                           stream_limit=s.grpc_stream_max_in_flight,
                                           connections=s.grpc_connections(), logs=self.logs)
            address = f"{s.grpc_address}:{s.grpc_port}"
            if tls is None:
                self._grpc.add_insecure_port(address)
            else:
                try:
                    credentials = GrpcioTls(tls)
                except ValueError as exc:
                    raise StartError(f"{tls.flag}: {exc}") from None
                renew = credentials.renew
                try:
                    self._grpc.add_secure_port(address, credentials.credentials)
                except RuntimeError as exc:  # the files were checked: grpc core says no more than this
                    raise StartError(f"{tls.flag}: grpcio cannot serve {address} (is the address taken?): "
                                     f"{exc}") from None
            await self._grpc.start()
        watch = None  # takes renewed TLS files
        if tls is not None and renew is not None and s.grpc_tls_reload_secs > 0:
            watch = TlsWatch(tls, s.grpc_tls, renew, s.grpc_tls_reload_secs)
        if s.allow_http:
            app = build_http_app(
                self.dataplane, self.planes.repository, s.http_max_body_bytes, s.http_max_json_bytes,
                restrictions=s.http_restrictions(), logs=self.logs,
            )
            if s.http_frontend == HttpFrontend.NATIVE:
                self._native_http = NativeHttpServer(self.dataplane, app, s.http_max_body_bytes, s.http_max_json_bytes,
                                                     s.http_restrictions(),
                                                     threads=self._core_threads(s.http_native_threads),
                                                     body_timeout_secs=s.http_body_timeout_secs,
                                                     max_connections=s.http_max_connections,
                                                     send_timeout_secs=s.http_send_timeout_secs)
                await self._native_http.start(s.http_address, s.http_port)
            else:
                self._runners.append(await start_http(app, s.http_address, s.http_port))
        if s.allow_metrics:
            self._gpu_gauges = make_gpu_gauges(os.environ) if s.allow_gpu_metrics else None
            metrics = build_metrics_registry(self.dataplane.registry, self.planes.repository.storage,
                                             self.dataplane.settle_answered, self.planes.custom_metrics,
                                             HostSampler() if s.allow_cpu_metrics else None, self._gpu_gauges,
                                             self.dataplane.caching.cache if self.dataplane.caching else None,
                                             watch.renewals if watch else None, python_gc)
            metrics_app = build_metrics_app(metrics)
            if s.http_frontend == HttpFrontend.NATIVE:  # the core's timeouts and connection share in front of it
                self._native_metrics = NativeHttpServer(self.dataplane, metrics_app, METRICS_BODY_BYTES,
                                                        METRICS_BODY_BYTES, threads=1,
                                                        body_timeout_secs=s.http_body_timeout_secs,
                                                        max_connections=s.http_max_connections, serves_infer=False,
                                                        send_timeout_secs=s.http_send_timeout_secs)
                await self._native_metrics.start(s.metrics_address, s.metrics_port)
            else:
                self._runners.append(await start_http(metrics_app, s.metrics_address, s.metrics_port))
        log.info("listening: grpc %s:%d%s, http %s:%d, metrics %s:%d", s.grpc_address, s.grpc_port,
                 "" if tls is None else f" ({tls.describe()})",
                 s.http_address, s.http_port, s.metrics_address, s.metrics_port)
        await self.health.update(False)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._health_loop()))
        if watch is not None:
            self._tasks.append(loop.create_task(watch.run()))
        await self._initial_load()
        python_gc.settle()  # what the initial load made is frozen before the first request
        self.dataplane.registry.changed = python_gc.settle_soon  # and again whenever the versions loaded change
        self.dataplane.started = True
        log.info("initial load done; server ready: %s", self.dataplane.ready())
        if s.control_mode == ControlMode.POLL:
            self._tasks.append(loop.create_task(self._poll_loop()))

    async def _initial_load(self) -> None:
        manager = self.planes.repository.manager
        await self.planes.repository.storage.sync()
        available = sorted(await manager.refresh_configs())
        if self.settings.control_mode == ControlMode.EXPLICIT:
            wanted = available if "*" in self.settings.load_models else self.settings.load_models
            manager.requested = set(wanted)
        else:
            wanted = available
            manager.want_repository()
        if not wanted:
            return
        try:
            await manager.load(wanted, fetch=False)
        except InferenceError as exc:  # one bad model never stops the server
            log.error("some models failed to load: %s", exc.message)

    async def _health_loop(self) -> None:
        while True:
            await self.health.update(self.dataplane.ready())
            await asyncio.sleep(0.5)

    async def _poll_loop(self) -> None:
        manager = self.planes.repository.manager
        while True:
            await asyncio.sleep(self.settings.poll_secs)
            try:
                await self.planes.repository.storage.sync()  # never raises for storage errors; keeps the cache
                for name in manager.removed_models():
                    await manager.unload(name)
                await manager.refresh_configs()  # parses changed config.pbtxt files off the loop
                changed = manager.changed_models()
                manager.want_repository()
                if changed:
                    log.info("repository poll: changes in %s", ", ".join(changed))
                    await manager.load(changed, fetch=False)
            except InferenceError as exc:
                log.error("repository poll: %s", exc.message)
            except Exception:  # keep polling whatever happens (Triton stops: their #6534)
                log.exception("repository poll failed; will retry")

    async def drain_and_stop(self) -> None:
        """Stop taking requests, let in-flight ones finish (up to the exit timeout), then stop."""
        dp = self.dataplane
        dp.accepting = False
        await self.health.update(False)
        deadline = time.monotonic() + self.settings.exit_timeout_secs
        while dp.requests_in_flight() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if dp.requests_in_flight():
            log.warning("exit timeout reached with %d requests in flight", dp.in_flight)
        for task in self._tasks:
            task.cancel()
        dp.manager.abandon_loads()  # a load hanging in model code must not hold the exit
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self._native_grpc is not None:
            await self._native_grpc.stop(grace=1.0)
        for native in (self._native_http, self._native_metrics):
            if native is not None:
                await native.stop(grace=1.0)
        for runner in self._runners:
            await runner.cleanup()
        await dp.registry.close()
        dp.shared_memory.close()  # unmap every registered region
        await dp.tracing.flush()
        if self._gpu_gauges is not None:
            self._gpu_gauges.close()


async def serve(settings: RuntimeSettings) -> None:
    server = Server(settings, build_planes(settings, default_backends(settings.cpus)),
                    logs=LogControl(settings.log_settings()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGTERM during the initial load (a model's initialize may hang) stops the server as promptly as later
    starting = loop.create_task(server.start())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
    else:
        starting.result()
        await stopping
    log.info("signal received: draining")
    await server.drain_and_stop()
    # Drained: what follows is the loop's and the interpreter's own shutdown (threads joined, the cores' runtimes
    # ended), a few hundred milliseconds. A SIGTERM then (a second one, or one racing a slow shutdown) must not
    # turn the clean exit into a kill (-15): ignored from here. The loop's handlers go first, or closing the loop
    # would set the default actions back.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)
    log.info("stopped")
