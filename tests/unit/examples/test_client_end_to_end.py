"""The demo client against the real runtime serving the generated repository over gRPC, in process."""

from __future__ import annotations

import asyncio
import io
import socket
from pathlib import Path

from ensemble_examples import client
from ensemble_runtime.server import Server, build_dataplane, default_backends
from ensemble_runtime.settings import RuntimeSettings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def serve_and_run_client(repo: Path, port: int, out: io.StringIO) -> int:
    settings = RuntimeSettings(
        model_repositories=[str(repo)],
        grpc_address="127.0.0.1",
        grpc_port=port,
        allow_http=False,
        allow_metrics=False,
        exit_timeout_secs=5.0,
    )
    server = Server(settings, build_dataplane(settings, default_backends()))
    await server.start()
    try:
        argv = ["--url", f"127.0.0.1:{port}", "--ready-timeout", "30"]
        return await asyncio.to_thread(client.main, argv, out)
    finally:
        await server.drain_and_stop()


def test_client_passes_every_check_against_the_runtime(example_repo: Path) -> None:
    out = io.StringIO()
    status = asyncio.run(serve_and_run_client(example_repo, free_port(), out))
    text = out.getvalue()
    assert status == 0, text
    assert f"{len(client.CHECKS)}/{len(client.CHECKS)} checks passed" in text
    assert "route 1 -> model_b" in text
    assert "FAILED" not in text


def test_client_exits_2_when_no_server_answers() -> None:
    out = io.StringIO()
    assert client.main(["--url", f"127.0.0.1:{free_port()}", "--ready-timeout", "0"], out) == 2
    assert "not ready" in out.getvalue()
