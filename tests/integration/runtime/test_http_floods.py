"""HTTP/1.1 floods, sent as real bytes from a raw socket to the native HTTP port and the metrics port: header lines
that never end are answered 431 and the connection closed after at most hyper's read buffer (~400 KiB), and
pipelined requests whose answers the client never reads stop being read once the answers cannot be written. Neither
leaves more than a few MiB behind, and other clients are served meanwhile."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.liveness import memory_kib
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, sent_until_refused, sent_until_stalled, wait_closed

GROWTH_KIB = 32 * 1024  # the most a flood may add to the server's peak resident memory
PATHS = {"http": "/v2/health/ready", "metrics": "/metrics"}


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository], ["--strict-readiness=false"]) as proc:
        proc.wait_ready()
        yield proc


def _port(proc: RuntimeProcess, port: str) -> int:
    return proc.metrics_port if port == "metrics" else int(proc.http_url.rsplit(":", 1)[1])


def _still_serving(proc: RuntimeProcess, port: str) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{_port(proc, port)}{PATHS[port]}", timeout=LOADED) as answer:
        assert answer.status == 200


@pytest.mark.parametrize("port", PATHS)
def test_header_lines_that_never_end_are_answered_431(server: RuntimeProcess, port: str) -> None:
    peak = memory_kib(server.pid)

    def lines() -> Iterator[bytes]:
        yield f"POST {PATHS[port]} HTTP/1.1\r\nHost: x\r\n".encode()
        for n in range(100_000):  # 11 MB of header lines at most
            yield b"X-Field-%d: %s\r\n" % (n, b"v" * 100)

    with socket.create_connection(("127.0.0.1", _port(server, port)), timeout=LOADED) as sock:
        sent = sent_until_refused(sock, lines())
        answer = wait_closed(sock, LOADED)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert sent < 4 << 20, f"{sent} bytes of header lines were read"
    assert memory_kib(server.pid) - peak < GROWTH_KIB
    _still_serving(server, port)


@pytest.mark.parametrize("port", PATHS)
def test_pipelined_requests_whose_answers_are_never_read_stop_being_read(server: RuntimeProcess, port: str) -> None:
    burst = f"GET {PATHS[port]} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 1000
    peak = memory_kib(server.pid)
    with socket.create_connection(("127.0.0.1", _port(server, port)), timeout=LOADED) as sock:
        sent = sent_until_stalled(sock, burst)
        assert sent is not None, "256 MiB of requests read while their answers went unread"
        _still_serving(server, port)  # the flooding connection open, stalled
    assert memory_kib(server.pid) - peak < GROWTH_KIB
    _still_serving(server, port)
