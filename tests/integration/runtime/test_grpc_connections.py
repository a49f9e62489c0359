"""The gRPC port's connections, on both front ends: one that does not open HTTP/2 (its preface and SETTINGS) within
the handshake timeout is closed, as grpc core's server closes it (Triton: 120 s, "Did not receive HTTP/2 settings
before handshake timeout"), however slowly its bytes drip in; one whose peer stops answering keepalive PINGs is
closed (`--grpc-keepalive-time`, `--grpc-keepalive-timeout`, as Triton's); one that answers them is kept, idle or
not. On the native front end, one carries at most `--grpc-max-concurrent-streams` calls, so calls that never send
their message (15 bytes of HEADERS each) cannot pile up in memory (grpcio's front end does not take the limit: its
server applies it only once acknowledged and refuses the calls a client opened before). The descriptors come back
and the server goes on serving meanwhile."""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.support import raw_grpc
from tests.support.grpc_port import (
    FRONTENDS,
    MODEL_INFER,
    PREFACE,
    SETTINGS,
    bodiless_calls,
    connect,
    frames,
    native_only,
    serving,
    still_serving,
)
from tests.support.liveness import memory_kib
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, wait_closed

HANDSHAKE_SECS = 2.0
MAX_STREAMS = 8  # on the handshaking servers
KEEPALIVE_MS = 1000  # both the time and the timeout on the keepalive servers
PING = 0x6


@pytest.fixture(scope="module", params=FRONTENDS)
def handshaking(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    with serving(repository, request.param, [f"--grpc-handshake-timeout-secs={HANDSHAKE_SECS}",
                                              f"--grpc-max-concurrent-streams={MAX_STREAMS}"]) as proc:
        yield proc


@pytest.fixture(scope="module", params=FRONTENDS)
def pinging(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    with serving(repository, request.param, [f"--grpc-keepalive-time={KEEPALIVE_MS}",
                                              f"--grpc-keepalive-timeout={KEEPALIVE_MS}"]) as proc:
        yield proc


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (what it sent before is read and dropped)."""
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(65536):
                return True
        except ConnectionError:
            return True
    return False


def _frame_types(wire: bytes) -> list[int]:
    return [kind for kind, _, _ in frames(wire)]


def _read_for(sock: socket.socket, seconds: float) -> bytes:
    received = bytearray()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and select.select([sock], [], [], left)[0]:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        received += chunk
    return bytes(received)


def _descriptors(proc: RuntimeProcess) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


@pytest.mark.parametrize("sent", [
    b"", PREFACE[:10], PREFACE, PREFACE + SETTINGS[:5],
    PREFACE + b"\x00\x00\x0c\x04\x00\x00\x00\x00\x00" + b"\x00\x03\x00\x00",  # 12 bytes of SETTINGS announced, 4 sent
], ids=["nothing", "part-of-the-preface", "the-preface", "part-of-settings", "settings-cut-short"])  # fmt: skip
def test_a_connection_that_does_not_open_http2_is_closed_at_the_deadline(
    handshaking: RuntimeProcess, sent: bytes
) -> None:
    start = time.monotonic()
    with connect(handshaking) as sock:
        sock.sendall(sent)
        wait_closed(sock, HANDSHAKE_SECS + LOADED)
    took = time.monotonic() - start
    assert took >= HANDSHAKE_SECS - 0.1, f"closed after {took:.2f} s, before the deadline"
    still_serving(handshaking)


def test_bytes_dripping_in_do_not_hold_the_deadline_off(handshaking: RuntimeProcess) -> None:
    handshake = PREFACE + SETTINGS
    start = time.monotonic()
    sent = 0
    with connect(handshaking) as sock:
        while sent < len(handshake) and not _closed(sock):
            try:
                sock.sendall(handshake[sent:sent + 1])
            except ConnectionError:
                break
            sent += 1
            time.sleep(0.25)  # the drip itself: 33 bytes over ~8 s, against a 2 s deadline
        else:
            wait_closed(sock, LOADED)
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
    socks = [connect(handshaking) for _ in range(100)]
    try:
        still_serving(handshaking)  # while they are open
        deadline = time.monotonic() + HANDSHAKE_SECS + LOADED
        for sock in socks:
            wait_closed(sock, max(deadline - time.monotonic(), 0.1))
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + LOADED
    while _descriptors(handshaking) > before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _descriptors(handshaking) <= before + 2, (before, _descriptors(handshaking))
    still_serving(handshaking)


def test_a_peer_that_stops_answering_pings_is_closed(pinging: RuntimeProcess) -> None:
    start = time.monotonic()
    with connect(pinging) as sock:
        sock.sendall(PREFACE + SETTINGS)  # and nothing more: no SETTINGS or PING acknowledged
        received = wait_closed(sock, 2 * KEEPALIVE_MS / 1000 + LOADED)
    took = time.monotonic() - start
    assert PING in _frame_types(received), _frame_types(received)
    assert took >= KEEPALIVE_MS / 1000, f"closed after {took:.2f} s"
    still_serving(pinging)


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


def test_a_connection_carries_at_most_the_calls_it_was_told(handshaking: RuntimeProcess) -> None:
    native_only(handshaking)
    with connect(handshaking) as sock:
        sock.sendall(bodiless_calls(3 * MAX_STREAMS))
        frames_read = frames(_read_for(sock, 3.0))
    advertised = [payload for kind, stream, payload in frames_read if kind == 0x4 and stream == 0 and payload]
    settings = {int.from_bytes(p[i:i + 2], "big"): int.from_bytes(p[i + 2:i + 6], "big")
                for p in advertised for i in range(0, len(p), 6)}
    assert settings.get(0x3) == MAX_STREAMS, settings  # SETTINGS_MAX_CONCURRENT_STREAMS
    refused = {stream for kind, stream, payload in frames_read if kind == 0x3 and payload == (7).to_bytes(4, "big")}
    assert refused == {2 * n + 1 for n in range(MAX_STREAMS, 3 * MAX_STREAMS)}  # REFUSED_STREAM, the ones past it
    still_serving(handshaking)


def test_bodiless_calls_hold_no_more_memory_than_the_limit_allows(handshaking: RuntimeProcess) -> None:
    native_only(handshaking)
    before = memory_kib(handshaking.pid, "VmRSS")
    with connect(handshaking) as sock:
        sock.sendall(PREFACE + SETTINGS)
        wire = bodiless_calls(5000)[len(PREFACE + SETTINGS):]
        sock.sendall(wire)  # ~75 KB: before the limit (and tonic's 8 KiB per call up front) +45 MiB
        _read_for(sock, 2.0)
        grown = memory_kib(handshaking.pid, "VmRSS") - before
    print(f"5000 bodiless calls on one connection: {grown} KiB")
    assert grown < 8 * 1024, f"+{grown} KiB"
    still_serving(handshaking)


def test_messages_that_declare_more_than_they_send_hold_only_what_came(handshaking: RuntimeProcess) -> None:
    """A message's 5-byte prefix declares its length: the core takes it as a bound, never as a size to allocate.
    Past `--grpc-max-message-bytes` it is refused at once; under it, a call that ends early is a truncated message,
    and calls that stay open hold only the bytes that came (`MAX_STREAMS` of them declaring 60 MiB each here)."""
    native_only(handshaking)
    start = b"\x0a\x07add_sub"  # the message's first bytes: its model_name
    prefix = [struct.pack(">BI", 0, declared) + start for declared in (2**32 - 1, 60 << 20)]
    huge = raw_grpc.call(handshaking.grpc_url, MODEL_INFER, [prefix[0]], timeout=LOADED)
    assert huge.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], huge
    assert huge.message.startswith("Received message larger than max (4294967295 vs. "), huge.message
    truncated = raw_grpc.call(handshaking.grpc_url, MODEL_INFER, [prefix[1]], timeout=LOADED)
    assert truncated.status == grpc.StatusCode.INTERNAL.value[0], truncated  # grpcio's "Unexpected EOF..."
    before = memory_kib(handshaking.pid, "VmRSS")
    with raw_grpc.RawConnection(handshaking.grpc_url, LOADED) as connection:
        for stream in connection.open_calls(MODEL_INFER, MAX_STREAMS):
            connection.more(stream, [prefix[1]])
        _read_for(connection.sock, 2.0)
        grown = memory_kib(handshaking.pid, "VmRSS") - before
    assert grown < 8 * 1024, f"+{grown} KiB for {MAX_STREAMS} calls that declared 60 MiB each"
    still_serving(handshaking)


def test_calls_past_the_limit_wait_in_the_client_and_all_succeed(handshaking: RuntimeProcess) -> None:
    # 2000 calls at once on a new channel: grpc core's client waits for the server's SETTINGS before it opens
    # streams, then queues what the limit does not let through. (grpcio's front end, which has no limit, cancels
    # some of so many calls on one connection, before this change too.)
    native_only(handshaking)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(a.tobytes())
    with grpc.insecure_channel(handshaking.grpc_url) as channel:  # one connection
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        futures = [stub.ModelInfer.future(request, timeout=LOADED) for _ in range(250 * MAX_STREAMS)]
        answers = [future.result() for future in futures]
    for answer in answers:
        np.testing.assert_array_equal(np.frombuffer(answer.raw_output_contents[0], np.float32), (a + a).ravel())
