"""The native HTTP port's connections open at once (`--http-max-connections`): past it, a new connection from the
address holding most is closed at once, while one from another address is served and the first address's quietest
connection gives way (closed), so one address that opens and keeps connections cannot keep the others out. Before,
the port had no limit: connections were bounded only by descriptors and memory."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, is_open, wait_closed

MAX_CONNECTIONS = 8


@pytest.fixture(scope="module")
def limited(repository: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository], ["--strict-readiness=false",
                                       f"--http-max-connections={MAX_CONNECTIONS}"]) as proc:
        proc.wait_ready()
        yield proc


def _connect(proc: RuntimeProcess, source: str = "") -> socket.socket:
    host, port = proc.http_url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=LOADED, source_address=(source, 0))


def _live(sock: socket.socket) -> int:
    """Asks `/v2/health/live` on a kept-alive connection; the status."""
    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    answer.read()
    return answer.status


def _kept(proc: RuntimeProcess, deadline: float) -> socket.socket:
    """A connection the server keeps (it answers on it), opened before `deadline`."""
    while True:
        sock = _connect(proc)
        try:
            if _live(sock) == 200:
                return sock
        except (ConnectionError, http.client.HTTPException):
            pass
        sock.close()
        assert time.monotonic() < deadline, "no place for a connection"


def test_a_port_one_address_fills_makes_room_for_another(limited: RuntimeProcess) -> None:
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + LOADED
        for _ in range(MAX_CONNECTIONS):
            held.append(_kept(limited, deadline))
        time.sleep(0.05)  # then held[1:] ask again, so held[0] is the quietest by a margin (the port counts in ms)
        for sock in held[1:]:
            assert _live(sock) == 200
        with _connect(limited) as past:
            wait_closed(past, LOADED)
        with _connect(limited, source="127.0.0.2") as other:
            assert _live(other) == 200
            wait_closed(held[0], LOADED)  # the quietest: nothing read from it since its first request
            assert all(is_open(sock) for sock in held[1:])
            assert _live(other) == 200
        for sock in held[1:]:
            assert _live(sock) == 200
    finally:
        for sock in held:
            sock.close()
