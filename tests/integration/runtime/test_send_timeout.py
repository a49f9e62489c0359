"""A connection whose peer takes none of its answer's bytes for the send timeout (`--http-send-timeout-secs`,
`--grpc-send-timeout-secs`; native front ends) is closed, and what it held with it, whether its TCP reads stopped
or (gRPC) its HTTP/2 flow control gives the answer no room; a peer that reads slowly is served in full. Before, a
peer that asked for large answers and never read them held them (up to 256 calls of a gRPC connection, on each of
its connections) for as long as its connection lived: hyper has no write timeout, and a gRPC peer that keeps its
window shut still answers keepalive pings.

Each answer here is 32 MiB (the `echo` model returns its input), more than loopback's socket buffers take in, so
the server's writes wait on the peer; whether the server closed its end is read from /proc/net/tcp, so the peer
reads nothing until then."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import h2.settings
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb

from tests.integration.runtime import repo
from tests.support import raw_grpc
from tests.support.grpc_port import MODEL_INFER, MODEL_STREAM_INFER
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, server_keeps, wait_server_closed

SEND_TIMEOUT = 5.0
ELEMENTS = 8 * 1024 * 1024  # FP32: 32 MiB each way


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root: Path = tmp_path_factory.mktemp("echo-repo")
    repo.echo_model(root)
    with RuntimeProcess([root], ["--grpc-frontend=native", "--http-frontend=native",
                                 f"--grpc-send-timeout-secs={SEND_TIMEOUT}",
                                 f"--http-send-timeout-secs={SEND_TIMEOUT}"]) as proc:
        proc.wait_ready()
        proc.wait_model_ready("echo")
        yield proc


def _http_request(data: bytes) -> bytes:
    """POST /v2/models/echo/infer with `data` as `x` and `y` asked for as binary data."""
    elements = len(data) // 4
    header = json.dumps({
        "inputs": [{"name": "x", "shape": [elements], "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }).encode()
    head = (f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(header) + len(data)}\r\n\r\n")
    return head.encode() + header + data


def _http_connection(proc: RuntimeProcess) -> socket.socket:
    """A connection to the HTTP port whose receive buffer is small (set before connecting: the window it offers)."""
    host, _, port = proc.http_url.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(LOADED)
    sock.connect((host, int(port)))
    return sock


def _read_to_end(sock: socket.socket, want: int) -> bytes:
    """What the server sends until it closes (or resets) the connection, or `want` bytes have come."""
    received = bytearray()
    while len(received) < want:
        try:
            chunk = sock.recv(256 * 1024)
        except ConnectionError:
            break
        if not chunk:
            break
        received += chunk
    return bytes(received)


def _still_serving(proc: RuntimeProcess) -> None:
    x = np.arange(4, dtype=np.float32)
    with proc.grpc_client() as grpc_client, proc.http_client() as http_client:
        for client, infer_input in ((grpc_client, grpcclient.InferInput("x", [4], "FP32")),
                                    (http_client, httpclient.InferInput("x", [4], "FP32"))):
            infer_input.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer("echo", [infer_input]).as_numpy("y"), x)


def test_http_a_peer_that_reads_nothing_is_closed(echo_server: RuntimeProcess) -> None:
    data = np.ones(ELEMENTS, np.float32).tobytes()
    with _http_connection(echo_server) as sock:
        sock.sendall(_http_request(data))
        wait_server_closed(sock, SEND_TIMEOUT + LOADED)
        received = _read_to_end(sock, len(data) + 4096)
    assert len(received) < len(data), "the answer was cut short: its connection was closed"
    _still_serving(echo_server)


def test_http_a_peer_that_reads_slowly_gets_the_whole_answer(echo_server: RuntimeProcess) -> None:
    data = np.arange(ELEMENTS, dtype=np.float32).tobytes()
    with _http_connection(echo_server) as sock:
        sock.sendall(_http_request(data))
        started = time.monotonic()
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += sock.recv(1)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        # for two send timeouts a few KiB at a time (~80 KiB/s): too slow for the kernel to wake the server's
        # waiting write (it waits for about half of a full send buffer, ~2 MiB, to drain), yet reading all along
        received = bytearray()
        while time.monotonic() - started < 2 * SEND_TIMEOUT and (chunk := sock.recv(4096)):
            received += chunk
            time.sleep(0.05)
        received += _read_to_end(sock, length - len(received))
        assert head.startswith(b"HTTP/1.1 200"), head
        assert bytes(received).endswith(data), "the whole answer, its data last"
        assert server_keeps(sock), "and the connection is kept for the next request"
    _still_serving(echo_server)


def test_grpc_a_peer_that_reads_nothing_is_closed(echo_server: RuntimeProcess) -> None:
    data = np.ones(ELEMENTS, np.float32).tobytes()
    request = pb.ModelInferRequest(model_name="echo", raw_input_contents=[data])
    request.inputs.add(name="x", datatype="FP32", shape=[ELEMENTS])
    with raw_grpc.RawConnection(echo_server.grpc_url, LOADED) as connection:
        # the widest windows HTTP/2 allows: flow control lets the whole answer out, only TCP holds it back
        connection.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        connection.conn.increment_flow_control_window(2**31 - 1 - 65535)
        connection.sock.sendall(connection.conn.data_to_send())
        stream = connection.open_call(MODEL_INFER)
        connection.start(stream, [raw_grpc.frame(request.SerializeToString())])
        wait_server_closed(connection.sock, SEND_TIMEOUT + LOADED)
        with pytest.raises(ConnectionError):  # the call never ends: its connection closed under it
            connection.answer(stream)
    _still_serving(echo_server)


@pytest.mark.parametrize("method", [MODEL_INFER, MODEL_STREAM_INFER])
def test_grpc_a_peer_that_gives_the_answer_no_room_is_closed(echo_server: RuntimeProcess, method: str) -> None:
    """A zero HTTP/2 window: the peer reads every byte the server sends (PINGs and SETTINGS are answered) but lets
    no answer through, as a client library does for a call its application stopped reading; a unary answer or a
    stream's."""
    data = np.ones(ELEMENTS, np.float32).tobytes()
    request = pb.ModelInferRequest(model_name="echo", raw_input_contents=[data])
    request.inputs.add(name="x", datatype="FP32", shape=[ELEMENTS])
    with raw_grpc.RawConnection(echo_server.grpc_url, LOADED) as connection:
        connection.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        connection.sock.sendall(connection.conn.data_to_send())
        stream = connection.open_call(method)
        connection.start(stream, [raw_grpc.frame(request.SerializeToString())])
        deadline = time.monotonic() + SEND_TIMEOUT + LOADED
        with pytest.raises(ConnectionError):  # reading all the while: it ends with the connection, unanswered
            connection.idle(deadline - time.monotonic())
        assert time.monotonic() < deadline, "closed within the send timeout (and a loaded machine's margin)"
    # a client that reads gets the same 32 MiB answer whole (it goes out in pieces)
    with echo_server.grpc_client() as client:
        x = np.arange(ELEMENTS, dtype=np.float32)
        infer_input = grpcclient.InferInput("x", [ELEMENTS], "FP32")
        infer_input.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("echo", [infer_input]).as_numpy("y"), x)
    _still_serving(echo_server)
