"""The native HTTP port's connections open at once (`--http-max-connections`): past it, a new connection from the
address holding most is closed at once, while one from another address is served and the first address's quietest
connection gives way (closed; after the answer it was waiting for, where it was), so one address that opens and keeps
connections cannot keep the others out. Before,
the port had no limit: connections were bounded only by descriptors and memory. The metrics port is served by a core
that forwards every request to the metrics app, with the same bounds; before, aiohttp served it with none (3,000
connections that sent half a request's headers were all still held after 120 s)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, is_open, wait_closed

MAX_CONNECTIONS = 8


HEADER_SECS = 30.0  # hyper's header read timeout, the native core's
PORTS = {"http": "/v2/health/live", "metrics": "/metrics"}


@pytest.fixture(scope="module")
def limited(repository: Path, held_repository: Path, held_dir: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository, held_repository], ["--strict-readiness=false",
                                                        f"--http-max-connections={MAX_CONNECTIONS}"],
                        env={"HELD_MODEL_DIR": str(held_dir)}) as proc:
        proc.wait_ready()
        proc.wait_model_ready("py_held")
        yield proc


def _connect(proc: RuntimeProcess, port: str, source: str = "") -> socket.socket:
    number = proc.metrics_port if port == "metrics" else int(proc.http_url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", number), timeout=LOADED, source_address=(source, 0))


def _get(sock: socket.socket, path: str) -> http.client.HTTPResponse:
    """GET `path` on a kept-alive connection; the answer, read."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    answer.read()
    return answer


def _kept(proc: RuntimeProcess, port: str, deadline: float) -> socket.socket:
    """A connection the server keeps (it answers on it), opened before `deadline`."""
    while True:
        sock = _connect(proc, port)
        try:
            if _get(sock, PORTS[port]).status == 200:
                return sock
        except (ConnectionError, http.client.HTTPException):
            pass
        sock.close()
        assert time.monotonic() < deadline, "no place for a connection"


@pytest.mark.parametrize("port", PORTS)
def test_a_port_one_address_fills_makes_room_for_another(limited: RuntimeProcess, port: str) -> None:
    path = PORTS[port]
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + LOADED
        for _ in range(MAX_CONNECTIONS):
            held.append(_kept(limited, port, deadline))
        time.sleep(0.05)  # then held[1:] ask again, so held[0] is the quietest by a margin (the port counts in ms)
        for sock in held[1:]:
            assert _get(sock, path).status == 200
        with _connect(limited, port) as past:
            wait_closed(past, LOADED)
        with _connect(limited, port, source="127.0.0.2") as other:
            assert _get(other, path).status == 200
            wait_closed(held[0], LOADED)  # the quietest: nothing read from it since its first request
            assert all(is_open(sock) for sock in held[1:])
            assert _get(other, path).status == 200
        for sock in held[1:]:
            assert _get(sock, path).status == 200
    finally:
        for sock in held:
            sock.close()


def test_a_connection_waiting_on_its_answer_gives_way_after_the_answer(limited: RuntimeProcess, held_dir: Path) -> None:
    """The connection that waits longest on the server has read nothing for longest: the quietest. Told to give way
    while its request is being answered, it finishes that answer (`Connection: close`), then closes; before, it was
    closed at once and the answer lost."""
    body = json.dumps({"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [7.0]}]}).encode()
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + LOADED
        for _ in range(MAX_CONNECTIONS):
            held.append(_kept(limited, "http", deadline))
        waiting = held[0]
        waiting.sendall(b"POST /v2/models/py_held/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        while not (held_dir / "started").exists():
            assert time.monotonic() < deadline, "py_held never started"
            time.sleep(0.01)
        time.sleep(0.05)  # then held[1:] ask again, so the waiting one is the quietest by a margin
        for sock in held[1:]:
            assert _get(sock, PORTS["http"]).status == 200
        with _connect(limited, "http", source="127.0.0.2") as other:
            assert _get(other, PORTS["http"]).status == 200  # served: a place was given up for it
            time.sleep(0.5)
            assert is_open(waiting), "closed while its request was being answered"
            (held_dir / "release").write_text("")
            answer = http.client.HTTPResponse(waiting)
            answer.begin()
            assert answer.status == 200
            assert json.loads(answer.read())["outputs"][0]["data"] == [7.0]
            assert answer.getheader("Connection") == "close"
            wait_closed(waiting, LOADED)
            assert all(is_open(sock) for sock in held[1:])
    finally:
        for sock in held:
            sock.close()


def test_the_metrics_port_serves_no_inference(limited: RuntimeProcess) -> None:
    with _kept(limited, "metrics", time.monotonic() + LOADED) as sock:
        answer = _get(sock, "/v2/models/add_sub/infer")  # forwarded to the metrics app: no such route
        assert answer.status == 404
        assert answer.getheader("Server") == "ensemble-runtime"
        answer = _get(sock, "/metrics")
        assert answer.status == 200
        assert answer.getheader("Content-Type", "").startswith("text/plain")


def test_headers_sent_by_half_are_cut_off_on_both_ports(limited: RuntimeProcess) -> None:
    """A request whose headers never end holds its connection HEADER_SECS (hyper's header timeout), not forever."""
    deadline = time.monotonic() + LOADED
    halves = {port: _kept(limited, port, deadline) for port in PORTS}  # places the last tests' connections held
    try:
        start = time.monotonic()
        for port, sock in halves.items():
            sock.sendall(f"GET {PORTS[port]} HTTP/1.1\r\nHost: x\r\n".encode())
        for sock in halves.values():
            wait_closed(sock, HEADER_SECS + LOADED)
        assert time.monotonic() - start >= HEADER_SECS - 1
    finally:
        for sock in halves.values():
            sock.close()
