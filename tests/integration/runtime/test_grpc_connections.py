"""The gRPC port's connections, on both front ends: one that does not open HTTP/2 (its preface and SETTINGS) within
the handshake timeout is closed, as grpc core's server closes it (Triton: 120 s, "Did not receive HTTP/2 settings
before handshake timeout"), however slowly its bytes drip in; one whose peer stops answering keepalive PINGs is
closed (`--grpc-keepalive-time`, `--grpc-keepalive-timeout`, as Triton's); one that answers them is kept, idle or
not. The descriptors come back and the server goes on serving meanwhile."""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import InferInput, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from tests.support import raw_grpc
from tests.support.runtime_process import RuntimeProcess

FRONTENDS = ["native", "grpcio"]
HANDSHAKE_SECS = 2.0
KEEPALIVE_MS = 1000  # both the time and the timeout on the keepalive servers
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
PING = 0x6
LOADED = 30.0  # how late a close may come on a loaded 2-core machine


def _started(repository: Path, frontend: str, flags: list[str]) -> RuntimeProcess:
    proc = RuntimeProcess([repository], [f"--grpc-frontend={frontend}", "--strict-readiness=false", *flags]).start()
    try:
        proc.wait_ready()
        proc.wait_model_ready("add_sub")
    except BaseException:
        proc.stop()
        raise
    return proc


@pytest.fixture(scope="module", params=FRONTENDS)
def handshaking(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    proc = _started(repository, request.param, [f"--grpc-handshake-timeout-secs={HANDSHAKE_SECS}"])
    yield proc
    proc.stop()


@pytest.fixture(scope="module", params=FRONTENDS)
def pinging(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    proc = _started(repository, request.param, [f"--grpc-keepalive-time={KEEPALIVE_MS}",
                                                f"--grpc-keepalive-timeout={KEEPALIVE_MS}"])
    yield proc
    proc.stop()


def _connect(proc: RuntimeProcess) -> socket.socket:
    host, _, port = proc.grpc_url.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=LOADED)


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (what it sent before is read and dropped)."""
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(65536):
                return True
        except ConnectionError:
            return True
    return False


def _wait_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes `sock`; AssertionError if it has not within `timeout`."""
    received = bytearray()
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionError:
            return bytes(received)
        if not chunk:
            return bytes(received)
        received += chunk
    raise AssertionError(f"the connection is still open after {timeout} s")


def _frame_types(wire: bytes) -> list[int]:
    types = []
    while len(wire) >= 9:
        length = int.from_bytes(wire[:3], "big")
        types.append(wire[3])
        wire = wire[9 + length:]
    return types


def _descriptors(proc: RuntimeProcess) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def _still_serving(proc: RuntimeProcess) -> None:
    a = np.ones((1, 16), np.float32)
    with proc.grpc_client() as client:
        inputs = [InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)


@pytest.mark.parametrize("sent", [
    b"", PREFACE[:10], PREFACE, PREFACE + SETTINGS[:5],
    PREFACE + b"\x00\x00\x0c\x04\x00\x00\x00\x00\x00" + b"\x00\x03\x00\x00",  # 12 bytes of SETTINGS announced, 4 sent
], ids=["nothing", "part-of-the-preface", "the-preface", "part-of-settings", "settings-cut-short"])  # fmt: skip
def test_a_connection_that_does_not_open_http2_is_closed_at_the_deadline(
    handshaking: RuntimeProcess, sent: bytes
) -> None:
    start = time.monotonic()
    with _connect(handshaking) as sock:
        sock.sendall(sent)
        _wait_closed(sock, HANDSHAKE_SECS + LOADED)
    took = time.monotonic() - start
    assert took >= HANDSHAKE_SECS - 0.1, f"closed after {took:.2f} s, before the deadline"
    _still_serving(handshaking)


def test_bytes_dripping_in_do_not_hold_the_deadline_off(handshaking: RuntimeProcess) -> None:
    handshake = PREFACE + SETTINGS
    start = time.monotonic()
    sent = 0
    with _connect(handshaking) as sock:
        while sent < len(handshake) and not _closed(sock):
            try:
                sock.sendall(handshake[sent:sent + 1])
            except ConnectionError:
                break
            sent += 1
            time.sleep(0.25)  # the drip itself: 33 bytes over ~8 s, against a 2 s deadline
        else:
            _wait_closed(sock, LOADED)
    took = time.monotonic() - start
    assert sent < len(handshake) - 1, f"the whole handshake went through ({took:.2f} s)"
    assert took >= HANDSHAKE_SECS - 0.1


def test_an_opened_connection_is_kept_past_the_deadline(handshaking: RuntimeProcess) -> None:
    with raw_grpc.RawConnection(handshaking.grpc_url, timeout=LOADED) as connection:
        connection.idle(2 * HANDSHAKE_SECS)  # ConnectionError if it is closed meanwhile
        answer = connection.call("/inference.GRPCInferenceService/ServerLive",
                                 [raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())])
    assert answer.status == 0
    assert pb.ServerLiveResponse.FromString(answer.data[5:]).live


def test_many_silent_connections_are_all_closed_and_their_descriptors_come_back(
    handshaking: RuntimeProcess,
) -> None:
    before = _descriptors(handshaking)
    socks = [_connect(handshaking) for _ in range(100)]
    try:
        _still_serving(handshaking)  # while they are open
        deadline = time.monotonic() + HANDSHAKE_SECS + LOADED
        for sock in socks:
            _wait_closed(sock, max(deadline - time.monotonic(), 0.1))
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + LOADED
    while _descriptors(handshaking) > before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _descriptors(handshaking) <= before + 2, (before, _descriptors(handshaking))
    _still_serving(handshaking)


def test_a_peer_that_stops_answering_pings_is_closed(pinging: RuntimeProcess) -> None:
    start = time.monotonic()
    with _connect(pinging) as sock:
        sock.sendall(PREFACE + SETTINGS)  # and nothing more: no SETTINGS or PING acknowledged
        received = _wait_closed(sock, 2 * KEEPALIVE_MS / 1000 + LOADED)
    took = time.monotonic() - start
    assert PING in _frame_types(received), _frame_types(received)
    assert took >= KEEPALIVE_MS / 1000, f"closed after {took:.2f} s"
    _still_serving(pinging)


def test_a_peer_that_answers_pings_keeps_its_idle_connection(pinging: RuntimeProcess) -> None:
    with raw_grpc.RawConnection(pinging.grpc_url, timeout=LOADED) as connection:
        pings = connection.idle(4 * KEEPALIVE_MS / 1000)  # twice the time a silent peer is given
        answer = connection.call("/inference.GRPCInferenceService/ServerLive",
                                 [raw_grpc.frame(pb.ServerLiveRequest().SerializeToString())])
    assert pings >= 1, "the server did not ping an idle connection"
    assert answer.status == 0


def test_a_grpc_channel_idle_between_calls_is_not_reconnected(pinging: RuntimeProcess) -> None:
    states: list[grpc.ChannelConnectivity] = []
    with grpc.insecure_channel(pinging.grpc_url) as channel:
        channel.subscribe(states.append, try_to_connect=True)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=LOADED).live
        time.sleep(4 * KEEPALIVE_MS / 1000)  # idle: the server pings, grpc answers
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=LOADED).live
        seen = list(states)
    after_ready = seen[seen.index(grpc.ChannelConnectivity.READY):]
    assert set(after_ready) == {grpc.ChannelConnectivity.READY}, seen
