"""The runtime serving a repository over gRPC inside the test's own process (no HTTP, no metrics)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ensemble_runtime.server import Server, build_planes, default_backends
from ensemble_runtime.settings import RuntimeSettings


@asynccontextmanager
async def serving_in_process(repo: Path, port: int) -> AsyncIterator[Server]:
    """Started on 127.0.0.1:`port`; drained and stopped on exit."""
    settings = RuntimeSettings(
        model_repositories=[str(repo)],
        grpc_address="127.0.0.1",
        grpc_port=port,
        allow_http=False,
        allow_metrics=False,
        exit_timeout_secs=5.0,
    )
    server = Server(settings, build_planes(settings, default_backends()))
    await server.start()
    try:
        yield server
    finally:
        await server.drain_and_stop()
