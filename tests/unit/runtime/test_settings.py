"""Runtime flags: defaults are RuntimeSettings' own (written once); given flags override them."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_runtime.settings import ControlMode, GrpcFrontend, HttpFrontend, RuntimeSettings, parse_settings


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
