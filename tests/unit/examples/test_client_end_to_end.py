"""The demo client against the real runtime serving the generated repository over gRPC, in process."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from ensemble_examples import client

from tests.support.ports import free_port
from tests.unit.examples.in_process import serving_in_process


async def serve_and_run_client(repo: Path, port: int, out: io.StringIO) -> int:
    async with serving_in_process(repo, port):
        argv = ["--url", f"127.0.0.1:{port}", "--ready-timeout", "30"]
        return await asyncio.to_thread(client.main, argv, out)


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
