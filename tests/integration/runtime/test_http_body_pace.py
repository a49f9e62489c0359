"""The native HTTP port's pace for request bodies (`--http-body-timeout-secs`): a body must arrive within the grace
period of its headers, plus 1 s per 500 bytes received, or the request is answered 408 and its connection closed,
on the infer endpoint the core serves and on a route it forwards to the app alike. Before, a request that declared
a body and sent none (or dripped it) held its connection, and for a forwarded one a Python handler, for as long as
its client liked (hyper times the headers only). A body that comes in time is served; the port goes on serving."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.http import InferenceServerClient, InferInput

from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import wait_closed

GRACE = 2.0
LOADED = 30.0  # how late an answer may come on a loaded 2-core machine
PATHS = {"infer": "/v2/models/add_sub/infer", "forwarded": "/v2/repository/index"}


@pytest.fixture(scope="module")
def paced(repository: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository], ["--strict-readiness=false", f"--http-body-timeout-secs={GRACE}"]) as proc:
        proc.wait_ready()
        proc.wait_model_ready("add_sub")
        yield proc


def _connect(proc: RuntimeProcess) -> socket.socket:
    host, port = proc.http_url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=LOADED)


def _head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _timed_out(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"connection: close" in head.lower(), head
    assert "did not arrive in time" in json.loads(body)["error"], body


def _still_serving(proc: RuntimeProcess) -> None:
    a = np.ones((1, 16), np.float32)
    client = InferenceServerClient(proc.http_url, network_timeout=LOADED)
    try:
        inputs = [InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a, binary_data=True)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
    finally:
        client.close()


@pytest.mark.parametrize("route", PATHS)
def test_a_body_that_never_comes_is_answered_408_at_the_grace(paced: RuntimeProcess, route: str) -> None:
    start = time.monotonic()
    with _connect(paced) as sock:
        sock.sendall(_head(PATHS[route], 100))
        answer = wait_closed(sock, GRACE + LOADED)
    took = time.monotonic() - start
    _timed_out(answer)
    assert took >= GRACE - 0.1, f"answered after {took:.2f} s, before the grace"
    _still_serving(paced)


@pytest.mark.parametrize("route", PATHS)
def test_a_dripping_body_is_answered_408(paced: RuntimeProcess, route: str) -> None:
    length = 100
    sent = 0
    with _connect(paced) as sock:
        sock.sendall(_head(PATHS[route], length))
        while sent < length and not select.select([sock], [], [], 0)[0]:
            sock.sendall(b" ")  # whitespace: valid JSON so far, whatever arrives
            sent += 1
            time.sleep(0.25)  # the drip itself: 100 bytes over 25 s against a 2 s grace and 500 B/s
        answer = wait_closed(sock, LOADED)
    assert sent < length - 1, f"the whole body went through: {answer!r}"
    _timed_out(answer)
    _still_serving(paced)


def test_a_body_that_comes_within_the_grace_is_served(paced: RuntimeProcess) -> None:
    a = [float(i) for i in range(16)]
    body = json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": [1, 16], "data": a}
                                  for name in ("INPUT0", "INPUT1")]}).encode()
    with _connect(paced) as sock:
        sock.sendall(_head(PATHS["infer"], len(body)) + body[:10])
        time.sleep(GRACE / 2)  # a pause, within the grace
        sock.sendall(body[10:])
        sock.settimeout(LOADED)
        answer = sock.recv(65536)
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        head, _, rest = answer.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        while len(rest) < length:
            rest += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), answer
    outputs = {o["name"]: o["data"] for o in json.loads(rest)["outputs"]}
    assert outputs["OUTPUT0"] == [2 * x for x in a]
