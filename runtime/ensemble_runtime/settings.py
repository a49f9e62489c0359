"""Runtime settings from tritonserver-style command-line flags."""

from __future__ import annotations

import argparse
import enum
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from ensemble_contract.ports import GRPC_PORT, HTTP_PORT, METRICS_PORT
from pydantic import BaseModel, Field, PositiveFloat, PositiveInt

from ensemble_runtime.grpc_tls import GrpcTls, tls_from_flags
from ensemble_runtime.log_settings import FORMATS, LogSettings
from ensemble_runtime.python_gc import CHOICES as PYTHON_GC_POLICIES
from ensemble_runtime.restrictions import Category, RestrictionError, Restrictions, parse_restrictions
from ensemble_runtime.thread_policy import CHOICES as THREAD_POLICIES
from ensemble_runtime.thread_policy import INHERIT
from ensemble_runtime.traces import TraceSettings, settings_from_flags


class ControlMode(enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


class GrpcFrontend(enum.Enum):
    GRPCIO = "grpcio"  # grpcio's asyncio server
    NATIVE = "native"  # the Rust core, ensemble_runtime.protocol._native


class HttpFrontend(enum.Enum):
    AIOHTTP = "aiohttp"  # aiohttp's server for every route
    NATIVE = "native"  # the Rust core serves the infer endpoint and forwards the rest to the aiohttp app


# a write that waits this long for the peer to take bytes closes the connection (native cores; nginx's send_timeout)
SEND_TIMEOUT_SECS = 60.0


class GrpcConnections(BaseModel, frozen=True):
    """How the gRPC port treats its connections (both front ends)."""

    handshake_secs: PositiveFloat = 120.0  # grpc core's server handshake timeout, Triton's too
    keepalive_time_ms: PositiveInt = 7_200_000  # Triton's --grpc-keepalive-time default
    keepalive_timeout_ms: PositiveInt = 20_000  # Triton's --grpc-keepalive-timeout default
    max_concurrent_streams: int = Field(default=256, gt=0, lt=2**31)  # per connection; Triton sets none
    # across all connections (native front end): a connection keeps ~20 KiB and ~0.7 KiB per call it had open at
    # once; a call waiting for its message holds ~5 KiB more, a stream ~20 KiB
    max_connections: int = Field(default=1024, gt=0, lt=2**63)
    max_incomplete_calls: int = Field(default=4096, gt=0, lt=2**63)
    max_open_streams: int = Field(default=2048, gt=0, lt=2**63)
    send_timeout_secs: PositiveFloat = SEND_TIMEOUT_SECS  # native front end
    # a connection this old (+-10%) goes: GOAWAY, its calls answered, so clients spread over new replicas; 0: never
    max_age_secs: int = Field(default=0, ge=0, lt=2**31)
    # how long an aged connection's streams go on before they end UNAVAILABLE; 0: until their clients end them
    max_age_grace_secs: int = Field(default=0, ge=0, lt=2**31)


class RuntimeSettings(BaseModel):
    model_repositories: list[str] = Field(default_factory=list)
    repository_config: Path | None = None
    control_mode: ControlMode = ControlMode.NONE
    load_models: list[str] = Field(default_factory=list)
    poll_secs: float = 15.0
    grpc_address: str = "0.0.0.0"
    grpc_port: int = GRPC_PORT
    http_address: str = "0.0.0.0"
    http_port: int = HTTP_PORT
    metrics_address: str = "0.0.0.0"
    metrics_port: int = METRICS_PORT
    allow_grpc: bool = True
    allow_http: bool = True
    allow_metrics: bool = True
    allow_gpu_metrics: bool = True  # Triton's GPU gauges from NVML, where a GPU is visible
    allow_cpu_metrics: bool = True  # Triton's CPU gauges from /proc
    strict_readiness: bool = True
    exit_timeout_secs: float = 30.0
    grpc_max_message_bytes: int = 256 * 1024 * 1024
    grpc_stream_max_in_flight: int = 64
    grpc_frontend: GrpcFrontend = GrpcFrontend.NATIVE
    grpc_native_threads: int | None = Field(default=None, ge=0)  # None: native_threads() decides
    grpc_handshake_timeout_secs: PositiveFloat = GrpcConnections().handshake_secs
    grpc_keepalive_time: PositiveInt = GrpcConnections().keepalive_time_ms
    grpc_keepalive_timeout: PositiveInt = GrpcConnections().keepalive_timeout_ms
    grpc_max_concurrent_streams: int = Field(default=GrpcConnections().max_concurrent_streams, gt=0, lt=2**31)
    grpc_max_connections: int = Field(default=GrpcConnections().max_connections, gt=0, lt=2**63)
    grpc_max_incomplete_calls: int = Field(default=GrpcConnections().max_incomplete_calls, gt=0, lt=2**63)
    grpc_max_open_streams: int = Field(default=GrpcConnections().max_open_streams, gt=0, lt=2**63)
    grpc_send_timeout_secs: PositiveFloat = SEND_TIMEOUT_SECS
    grpc_max_connection_age_secs: int = Field(default=0, ge=0, lt=2**31)
    grpc_max_connection_age_grace_secs: int = Field(default=0, ge=0, lt=2**31)
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: Path | None = None
    grpc_server_key: Path | None = None
    grpc_root_cert: Path | None = None
    grpc_tls_reload_secs: float = Field(default=30.0, ge=0)  # 0: the files read at start only (as Triton)
    http_frontend: HttpFrontend = HttpFrontend.NATIVE
    http_native_threads: int | None = Field(default=None, ge=0)
    http_max_body_bytes: int = 256 * 1024 * 1024
    http_max_json_bytes: int = 8 * 1024 * 1024
    http_body_timeout_secs: PositiveFloat = 30.0  # the grace a body has past its headers (native HTTP core)
    http_max_connections: int = Field(default=1024, gt=0, lt=2**63)  # native HTTP core
    http_send_timeout_secs: PositiveFloat = SEND_TIMEOUT_SECS  # native HTTP core
    max_config_bytes: int = 1024 * 1024
    model_cache_dir: Path | None = None
    load_journal: Path | None = None  # default: <model_cache_dir>/load-journal when model_cache_dir is set
    log_verbose: int = 0
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_format: Literal["default", "ISO8601"] = "default"
    server_name: str = "ensemble-runtime"
    memory_budget_bytes: int = 0
    memory_factor: float = 2.0
    memory_policy: str = "refuse"
    event_loop: str = "uvloop"
    thread_policy: str = INHERIT
    python_gc: Literal["tuned", "stock"] = "tuned"  # python_gc.CHOICES
    cpus: int = Field(default=0, ge=0)  # 0: the CPUs the process may run on
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    repository_settle_secs: float = 1.0
    model_load_timeout_secs: float = 600.0
    max_instances_per_model: int = 64
    grpc_restricted_protocol: list[str] = Field(default_factory=list)  # validated by parse_settings
    http_restricted_api: list[str] = Field(default_factory=list)
    trace_config: list[str] = Field(default_factory=list)  # validated by parse_settings
    cache_config: list[str] = Field(default_factory=list)  # validated by parse_settings
    cache_directory: str = ""  # Triton's, where its cache libraries are: the local cache is built in here

    def grpc_restrictions(self) -> Restrictions:
        return parse_restrictions(self.grpc_restricted_protocol, grpc=True)

    def http_restrictions(self) -> Restrictions:
        return parse_restrictions(self.http_restricted_api, grpc=False)

    def log_settings(self) -> LogSettings:
        """The log settings the runtime starts with (clients may change them: log_settings.LogControl)."""
        return LogSettings(self.log_info, self.log_warning, self.log_error, self.log_verbose, self.log_format)

    def trace_settings(self) -> TraceSettings:
        """The trace settings the runtime starts with (clients may change them: traces.TraceControl)."""
        return settings_from_flags(self.trace_config)

    def response_cache_bytes(self) -> int | None:
        """The response cache's size from Triton's `--cache-config local,size=N` (None: no cache)."""
        size: int | None = None
        for item in self.cache_config:
            name, _, setting = item.partition(",")
            if name.strip() != "local":
                raise ValueError(f"--cache-config {item!r}: only the local cache is built in ('local,size=N')")
            key, _, value = setting.partition("=")
            if key.strip() != "size":
                raise ValueError(f"--cache-config {item!r}: the local cache takes size=BYTES")
            try:
                size = int(value)
            except ValueError:
                raise ValueError(f"--cache-config {item!r}: size must be a whole number of bytes") from None
            if size < 0:
                raise ValueError(f"--cache-config {item!r}: size must not be negative")
        return size

    def grpc_tls(self) -> GrpcTls | None:
        """The gRPC port's TLS (None: plaintext), its files read now; ValueError naming the flag that is wrong."""
        return tls_from_flags(self.grpc_use_ssl, self.grpc_use_ssl_mutual, self.grpc_server_cert,
                              self.grpc_server_key, self.grpc_root_cert)

    def grpc_connections(self) -> GrpcConnections:
        return GrpcConnections(handshake_secs=self.grpc_handshake_timeout_secs,
                               keepalive_time_ms=self.grpc_keepalive_time,
                               keepalive_timeout_ms=self.grpc_keepalive_timeout,
                               max_concurrent_streams=self.grpc_max_concurrent_streams,
                               max_connections=self.grpc_max_connections,
                               max_incomplete_calls=self.grpc_max_incomplete_calls,
                               max_open_streams=self.grpc_max_open_streams,
                               send_timeout_secs=self.grpc_send_timeout_secs,
                               max_age_secs=self.grpc_max_connection_age_secs,
                               max_age_grace_secs=self.grpc_max_connection_age_grace_secs)


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def build_parser() -> argparse.ArgumentParser:
    # Flags left out are left out of the namespace: their defaults are RuntimeSettings' own, written once.
    p = argparse.ArgumentParser(
        prog="ensemble-runtime",
        argument_default=argparse.SUPPRESS,
        description="Triton-compatible inference server for versioned model ensembles (tritonserver flag names).",
    )
    p.add_argument("--model-repository", "--model-store", action="append", dest="model_repositories",
                   help="model repository root (repeatable): a directory, or s3://bucket/prefix")
    p.add_argument("--repository-config", type=Path,
                   help="JSON file naming each model's source and config (rendered by the operator)")
    p.add_argument("--model-control-mode", choices=[m.value for m in ControlMode], dest="control_mode")
    p.add_argument("--load-model", action="append", dest="load_models",
                   help="model to load at startup in explicit mode (repeatable; '*' for all)")
    p.add_argument("--repository-poll-secs", type=float, dest="poll_secs")
    p.add_argument("--grpc-address")
    p.add_argument("--grpc-port", type=int)
    p.add_argument("--http-address")
    p.add_argument("--http-port", type=int)
    p.add_argument("--metrics-address")
    p.add_argument("--metrics-port", type=int)
    p.add_argument("--allow-grpc", type=_bool)
    p.add_argument("--allow-http", type=_bool)
    p.add_argument("--allow-metrics", type=_bool)
    p.add_argument("--allow-gpu-metrics", type=_bool,
                   help="write Triton's GPU gauges (nv_gpu_*, nv_energy_consumption) from NVML on /metrics")
    p.add_argument("--allow-cpu-metrics", type=_bool,
                   help="write Triton's CPU gauges (nv_cpu_*) from /proc on /metrics")
    p.add_argument("--strict-readiness", type=_bool)
    p.add_argument("--exit-timeout-secs", type=float)
    p.add_argument("--grpc-max-message-bytes", type=int,
                   help="largest gRPC message accepted or sent; larger ones are refused with RESOURCE_EXHAUSTED")
    p.add_argument("--grpc-stream-max-in-flight", type=int,
                   help="requests of one ModelStreamInfer stream run concurrently, at most this many at once; "
                        "the stream is read further as they finish")
    p.add_argument("--grpc-frontend", choices=[f.value for f in GrpcFrontend],
                   help="what serves the gRPC port: the native core (default; Rust: decodes ModelInfer and encodes "
                        "its response off the GIL, every other RPC forwarded to the same handlers), or grpcio's "
                        "server")
    p.add_argument("--grpc-native-threads", type=_non_negative,
                   help="threads of the native gRPC core (--grpc-frontend=native); 0: none, the event loop's "
                        "thread drives it (no hand-off between threads per request); default: 0 where the runtime "
                        "has one CPU (its affinity, or --cpus), else 1")
    p.add_argument("--grpc-use-ssl", type=_bool,
                   help="serve the gRPC port over TLS with --grpc-server-cert and --grpc-server-key (Triton's flag; "
                        "both front ends)")
    p.add_argument("--grpc-use-ssl-mutual", type=_bool,
                   help="serve the gRPC port over mutual TLS: as --grpc-use-ssl, and a client must present a "
                        "certificate that --grpc-root-cert's certificates signed (Triton's flag)")
    p.add_argument("--grpc-server-cert", type=Path, metavar="PEM",
                   help="the server's certificate, then any intermediates (with --grpc-use-ssl)")
    p.add_argument("--grpc-server-key", type=Path, metavar="PEM", help="the server's private key (with --grpc-use-ssl)")
    p.add_argument("--grpc-root-cert", type=Path, metavar="PEM",
                   help="the certificates a client's must chain to (with --grpc-use-ssl-mutual)")
    p.add_argument("--grpc-tls-reload-secs", type=_non_negative_float, metavar="SECS",
                   help="read the TLS files again this often and serve the connections accepted after with those "
                        "renewed (a Secret's renewal reaches a pod without a restart); 0: read at start only, as "
                        "Triton; default 30")
    p.add_argument("--grpc-handshake-timeout-secs", type=_positive(float),
                   help="a gRPC connection that has not opened HTTP/2 (the preface and its SETTINGS) this long after "
                        "it was accepted is closed (grpc core's server handshake timeout; Triton's: 120)")
    p.add_argument("--grpc-keepalive-time", type=_positive(int), metavar="MS",
                   help="milliseconds without a frame from the client after which the server sends a keepalive PING "
                        "(Triton's flag and default, 7200000; idle connections are pinged too)")
    p.add_argument("--grpc-keepalive-timeout", type=_positive(int), metavar="MS",
                   help="milliseconds the server waits for a keepalive PING's acknowledgement before closing the "
                        "connection (Triton's flag and default, 20000)")
    p.add_argument("--grpc-max-concurrent-streams", type=_positive(int, below=2**31),
                   help="calls open at once on one gRPC connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; "
                        "--grpc-frontend=native): gRPC clients queue the others; default 256 (Triton sets none, so "
                        "one connection may hold any number of calls that never send their message)")
    p.add_argument("--grpc-max-connections", type=_positive(int, below=2**63),
                   help="gRPC connections open at once (both front ends): past it, the new one is closed at once "
                        "or, on the native front end, when another address holds at least two more than the new "
                        "one's, that address's quietest connection is (after the calls it is answering, if any); "
                        "default 1024")
    p.add_argument("--grpc-max-incomplete-calls", type=_positive(int, below=2**63),
                   help="unary gRPC calls, across all connections, whose request message has not arrived in full "
                        "(--grpc-frontend=native): at the limit, the one that has waited longest gives way to a new "
                        "one (RESOURCE_EXHAUSTED); default 4096")
    p.add_argument("--grpc-max-open-streams", type=_positive(int, below=2**63),
                   help="streaming gRPC calls (ModelStreamInfer, health Watch) open at once across all connections "
                        "(--grpc-frontend=native): past it, the new one is refused RESOURCE_EXHAUSTED or, when "
                        "another address holds at least two more than the new one's, that address's quietest stream "
                        "ends RESOURCE_EXHAUSTED; default 2048")
    p.add_argument("--grpc-send-timeout-secs", type=_positive(float),
                   help="a gRPC connection whose peer takes none of the answers waiting for it for this long (its "
                        "TCP reads stopped, or its HTTP/2 window gives them no room) is closed, its calls with it "
                        "(--grpc-frontend=native; nginx's send_timeout); a peer that reads slowly is kept; default 60")
    p.add_argument("--grpc-max-connection-age-secs", type=_non_negative,
                   help="a gRPC connection about this old (+-10%%) goes: a GOAWAY, so the client opens a new one "
                        "(which a Kubernetes Service may send to a replica added since) and sends its next calls "
                        "there, while the calls on the old one are answered and its streams go on until their clients "
                        "end them (grpc core's max connection age, its grace unbounded; both front ends); default 0, "
                        "never")
    p.add_argument("--grpc-max-connection-age-grace-secs", type=_non_negative,
                   help="how long the streams of a connection that reached --grpc-max-connection-age-secs go on: "
                        "past it they end UNAVAILABLE once what they read is answered, so stream clients move to a "
                        "new connection too (grpc core's max connection age grace; both front ends); default 0, "
                        "until their clients end them")
    p.add_argument("--http-frontend", choices=[f.value for f in HttpFrontend],
                   help="what serves the HTTP port: the native core (default; Rust: serves the infer endpoint, "
                        "forwards every other route, and compressed requests, to the aiohttp app on a private "
                        "Unix socket), or aiohttp's server for all of it")
    p.add_argument("--http-native-threads", type=_non_negative,
                   help="threads of the native HTTP core (--http-frontend=native); 0: none, the event loop's "
                        "thread drives it; default as --grpc-native-threads")
    p.add_argument("--http-max-body-bytes", type=int,
                   help="largest HTTP request body (after inflating a compressed one); larger: 413")
    p.add_argument("--http-body-timeout-secs", type=_positive(float),
                   help="seconds a request body has, past its headers, to arrive, plus 1 s per 500 bytes received "
                        "(--http-frontend=native); a body slower than that is answered 408 and its connection "
                        "closed; default 30")
    p.add_argument("--http-max-connections", type=_positive(int, below=2**63),
                   help="HTTP connections open at once (--http-frontend=native): past it, the new one is closed at "
                        "once or, when another address holds at least two more than the new one's, that address's "
                        "quietest connection is (after the answer it is sending, if any); default 1024")
    p.add_argument("--http-send-timeout-secs", type=_positive(float),
                   help="an HTTP connection (and a metrics one) whose peer takes none of the answer's bytes for "
                        "this long (a write has waited on it that long) is closed (--http-frontend=native; nginx's "
                        "send_timeout); a peer that reads slowly is kept; default 60")
    p.add_argument("--http-max-json-bytes", type=int,
                   help="largest JSON part of an HTTP request (JSON is parsed, not mapped: keep it well below the "
                        "body limit and send large tensors as binary data); larger: 413")
    p.add_argument("--max-config-bytes", type=int,
                   help="largest config.pbtxt accepted; a larger one fails that model's load")
    p.add_argument("--model-cache-dir", type=Path)
    p.add_argument("--load-journal", type=Path,
                   help="file recording the versions being loaded, so one that was loading when the process died "
                        "is skipped after the restart (default: <model-cache-dir>/load-journal when "
                        "--model-cache-dir is given; the default cache dir is temporary, so none without it)")
    p.add_argument("--log-verbose", type=int, help="above 0: verbose (debug) records too (Triton's flag)")
    p.add_argument("--log-info", type=_bool, help="write info records (default true); all four log settings can be "
                                                   "changed while serving: GET/POST /v2/logging, gRPC LogSettings")
    p.add_argument("--log-warning", type=_bool, help="write warnings (default true)")
    p.add_argument("--log-error", type=_bool, help="write errors (default true)")
    p.add_argument("--log-format", choices=FORMATS, help="default: the runtime's lines; ISO8601: UTC time first")
    p.add_argument("--trace-config", action="append", dest="trace_config", metavar="[triton,]NAME=VALUE",
                   help="Triton's trace settings at start (repeat it): file=PATH (where traces are written; "
                        "not settable over the network), level=OFF|TIMESTAMPS, rate=N (one request in N), "
                        "count=N (-1: no end), log_frequency=N (0: written as the server stops; N: every N "
                        "traces to PATH.<k>). Changed while serving: GET/POST /v2/trace/setting, gRPC TraceSetting")
    p.add_argument("--cache-config", action="append", dest="cache_config", metavar="local,size=BYTES",
                   help="Triton's response cache: responses of models whose config has response_cache { enable: "
                        "true } are kept, at most BYTES of them, and a request with the same inputs is answered "
                        "from them (ModelInfer, ModelStreamInfer, HTTP infer and BLS; not decoupled models or sequences)")
    p.add_argument("--cache-directory", help="accepted as Triton takes it; the local cache is built in")
    p.add_argument("--server-name",
                   help="the name server metadata reports (Triton reports 'triton'; clients that check it, such as "
                        "NVIDIA's health examples, need --server-name=triton)")
    p.add_argument("--memory-budget-bytes", type=int,
                   help="memory a new version may take next to the loaded ones (0: no budget)")
    p.add_argument("--memory-factor", type=float,
                   help="estimated bytes in memory per byte of model files")
    p.add_argument("--memory-policy", choices=["refuse", "drain-then-swap"],
                   help="when a new version does not fit: refuse it (old keeps serving) or unload the old first "
                        "(not zero-downtime)")
    p.add_argument("--s3-endpoint-url",
                   help="S3 endpoint (default: AWS_ENDPOINT_URL, or the host:port in s3://host:port/bucket/prefix)")
    p.add_argument("--s3-region", help="S3 region (default: AWS_REGION, else us-east-1)")
    p.add_argument("--repository-settle-secs", type=float,
                   help="at startup, a version without a .complete marker must list the same twice this far apart")
    p.add_argument("--grpc-restricted-protocol", action="append", metavar="CATEGORIES:KEY=VALUE",
                   help="gRPC APIs in these categories (comma-separated: " + ", ".join(c.value for c in Category)
                        + ") answer only with metadata triton-grpc-protocol-KEY=VALUE (repeatable)")
    p.add_argument("--http-restricted-api", action="append", metavar="CATEGORIES:KEY=VALUE",
                   help="HTTP APIs in these categories answer only with header KEY: VALUE (repeatable)")
    p.add_argument("--model-load-timeout-secs", type=float,
                   help="a model version not loaded and warmed up within this time fails (UNAVAILABLE, the old "
                        "version keeps serving) and its load is abandoned; 0: no limit (Triton has none)")
    p.add_argument("--max-instances-per-model", type=int,
                   help="a model version whose instance groups ask for more instances (threads, sessions) than "
                        "this is refused; 0: no limit")
    p.add_argument("--event-loop", choices=["uvloop", "asyncio"],
                   help="event loop implementation (uvloop is faster; asyncio for debugging)")
    p.add_argument("--cpus", type=_non_negative,
                   help="CPUs the runtime sizes its thread pools for (ONNX Runtime's), at most those the process "
                        "may run on; 0 (default): those. The operator passes the container's CPU limit")
    p.add_argument("--thread-policy", choices=THREAD_POLICIES,
                   help="inherit (default): keep the policy the process was started with; batch: every thread "
                        "of the runtime runs under Linux's SCHED_BATCH, so a thread a request is handed to does not "
                        "preempt the one handing it over (for CPUs of its own: a busy neighbour on the same CPU "
                        "delays a wake-up by up to a scheduler tick while calls are in flight)")
    p.add_argument("--python-gc", choices=PYTHON_GC_POLICIES,
                   help="tuned (default): what is loaded is frozen out of Python's cyclic collector (and thawed "
                        "and collected when the versions loaded change, so an unloaded version's cycles are freed "
                        "at once), and its youngest generation is collected every 2000 net allocations, not 700; "
                        "stock: Python's own settings")
    return p


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, got '{text[:32]}'")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of 0 or more, got '{text[:32]}'")
    return value


def _positive(kind: type[int] | type[float], below: float = math.inf) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not (math.isfinite(value) and 0 < value < below):
            limit = "" if below == math.inf else f" and below {below}"
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__} above 0{limit}, got '{text[:32]}'")
        return value

    return parse


def parse_settings(argv: Sequence[str] | None = None) -> RuntimeSettings:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = RuntimeSettings(**vars(args))
    for flag, check in (("--grpc-restricted-protocol", settings.grpc_restrictions),
                        ("--http-restricted-api", settings.http_restrictions)):
        try:
            check()
        except RestrictionError as exc:
            parser.error(f"{flag}: {exc}")
    try:
        settings.trace_settings()
        settings.response_cache_bytes()
        settings.grpc_tls()
    except ValueError as exc:
        parser.error(str(exc))
    return settings
