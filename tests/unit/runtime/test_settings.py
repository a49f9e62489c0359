"""Runtime flags: defaults are RuntimeSettings' own (written once); given flags override them."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_runtime.protocol.on_loop import native_threads
from ensemble_runtime.settings import (
    ControlMode,
    GrpcConnections,
    GrpcFrontend,
    HttpFrontend,
    RuntimeSettings,
    parse_settings,
)


def test_no_flags_gives_the_models_defaults() -> None:
    assert parse_settings([]) == RuntimeSettings()


def test_flags_override_the_defaults() -> None:
    settings = parse_settings([
        "--model-repository=/a", "--model-store=s3://b/p", "--model-control-mode=explicit", "--load-model=m",
        "--grpc-port=9001", "--allow-http=false", "--memory-factor=1.5", "--repository-config=/r.json",
    ])  # fmt: skip
    assert settings.model_repositories == ["/a", "s3://b/p"]
    assert settings.control_mode is ControlMode.EXPLICIT and settings.load_models == ["m"]
    assert settings.grpc_port == 9001 and settings.http_port == RuntimeSettings().http_port
    assert settings.allow_http is False and settings.memory_factor == 1.5
    assert settings.repository_config == Path("/r.json")


def test_grpc_frontend_is_native_unless_grpcio_is_asked_for() -> None:
    assert RuntimeSettings().grpc_frontend is GrpcFrontend.NATIVE
    assert parse_settings(["--grpc-frontend=grpcio"]).grpc_frontend is GrpcFrontend.GRPCIO
    settings = parse_settings(["--grpc-frontend=native", "--grpc-native-threads=2"])
    assert settings.grpc_frontend is GrpcFrontend.NATIVE and settings.grpc_native_threads == 2
    with pytest.raises(SystemExit):
        parse_settings(["--grpc-frontend=other"])


def test_http_frontend_is_native_unless_aiohttp_is_asked_for() -> None:
    assert RuntimeSettings().http_frontend is HttpFrontend.NATIVE
    assert parse_settings(["--http-frontend=aiohttp"]).http_frontend is HttpFrontend.AIOHTTP
    settings = parse_settings(["--http-native-threads=2"])
    assert settings.http_frontend is HttpFrontend.NATIVE and settings.http_native_threads == 2
    with pytest.raises(SystemExit):
        parse_settings(["--http-frontend=other"])


def test_bad_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--model-control-mode=sometimes"], ["--allow-grpc=maybe"], ["--http-restricted-api=nope"]):
        with pytest.raises(SystemExit):
            parse_settings(argv)
    assert "--http-restricted-api" in capsys.readouterr().err


def test_trace_config_is_tritons_and_checked_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    settings = parse_settings(["--trace-config", "triton,file=/t.json", "--trace-config", "level=TIMESTAMPS",
                               "--trace-config=rate=10"]).trace_settings()
    assert (settings.file, settings.level, settings.rate, settings.count) == ("/t.json", ("TIMESTAMPS",), 10, -1)
    assert RuntimeSettings().trace_settings().level == ("OFF",)
    with pytest.raises(SystemExit):
        parse_settings(["--trace-config=level=TIMESTAMPS"])  # no file to write the traces to
    assert "tracing needs a trace file" in capsys.readouterr().err


def test_grpc_connection_flags_are_tritons_with_its_defaults() -> None:
    # tritonserver's --grpc-keepalive-time and --grpc-keepalive-timeout (milliseconds); the handshake timeout is
    # grpc core's fixed one, ours to set
    defaults = RuntimeSettings().grpc_connections()
    assert defaults == GrpcConnections(handshake_secs=120.0, keepalive_time_ms=7_200_000, keepalive_timeout_ms=20_000,
                                       max_concurrent_streams=256, max_connections=1024, max_incomplete_calls=4096,
                                       max_open_streams=2048)
    settings = parse_settings(["--grpc-keepalive-time=1500", "--grpc-keepalive-timeout=250",
                               "--grpc-handshake-timeout-secs=2.5", "--grpc-max-concurrent-streams=8",
                               "--grpc-max-connections=5", "--grpc-max-incomplete-calls=6", "--grpc-max-open-streams=7"])
    assert settings.grpc_connections() == GrpcConnections(handshake_secs=2.5, keepalive_time_ms=1500,
                                                          keepalive_timeout_ms=250, max_concurrent_streams=8,
                                                          max_connections=5, max_incomplete_calls=6,
                                                          max_open_streams=7)


def test_http_max_connections_defaults_to_1024() -> None:
    assert RuntimeSettings().http_max_connections == 1024
    assert parse_settings(["--http-max-connections=3"]).http_max_connections == 3


@pytest.mark.parametrize("argv", [
    ["--grpc-keepalive-time=0"], ["--grpc-keepalive-time=-5"], ["--grpc-keepalive-time=1.5"],
    ["--grpc-keepalive-timeout=abc"], ["--grpc-handshake-timeout-secs=0"], ["--grpc-handshake-timeout-secs=nan"],
    ["--grpc-handshake-timeout-secs=inf"], ["--grpc-handshake-timeout-secs=-1"],
    ["--grpc-max-concurrent-streams=0"], ["--grpc-max-concurrent-streams=2147483648"],
    ["--grpc-max-connections=0"], ["--grpc-max-connections=1.5"], ["--grpc-max-incomplete-calls=-1"],
    ["--grpc-max-incomplete-calls=9223372036854775808"], ["--grpc-max-open-streams=0"],
    ["--grpc-max-open-streams=many"], ["--http-max-connections=0"], ["--http-max-connections=-3"],
    ["--http-max-connections=9223372036854775808"],
])  # fmt: skip
def test_grpc_connection_flags_must_be_positive(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(argv)
    assert argv[0].split("=")[0] in capsys.readouterr().err


def test_native_cores_run_on_the_loop_by_default_with_one_cpu_only() -> None:
    settings = RuntimeSettings()
    assert settings.grpc_native_threads is None and settings.http_native_threads is None
    assert native_threads(None, 1) == 0  # one CPU: the event loop's thread drives the core
    assert native_threads(None, 2) == 1 and native_threads(None, 64) == 1
    assert native_threads(3, 1) == 3 and native_threads(0, 8) == 0  # as configured
    assert native_threads(None, 1, on_loop=False) == 1  # a build whose core cannot run on the loop
    assert parse_settings(["--grpc-native-threads=0", "--http-native-threads=0"]).grpc_native_threads == 0
    for flag in ("--grpc-native-threads=-1", "--http-native-threads=one"):
        with pytest.raises(SystemExit):
            parse_settings([flag])
