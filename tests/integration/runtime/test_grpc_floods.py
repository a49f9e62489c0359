"""HTTP/2's known floods, sent as real frames from a raw socket to the native gRPC port (with its own thread and on
the event loop's): streams reset as they open (CVE-2023-44487), a header block that never ends (CONTINUATION
frames, CVE-2024-27316), a header list that HPACK inflates a thousandfold, DATA frames that carry nothing
(CVE-2019-9518), and PING and SETTINGS frames whose answers the peer never reads (CVE-2019-9512, CVE-2019-9515).
The first four end the connection with a GOAWAY ENHANCE_YOUR_CALM (h2's limits, hyper's 16 KiB header list); the
last two stop being read once their answers cannot be written. Neither leaves more than a few MiB behind, and other
clients are served meanwhile. grpcio's front end (`--grpc-frontend=grpcio`) is not held to this: README."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import hpack
import pytest

from tests.support.grpc_port import MODEL_INFER, PREFACE, SETTINGS, connect, frames, serving, still_serving
from tests.support.liveness import memory_kib
from tests.support.runtime_process import RuntimeProcess
from tests.support.sockets import LOADED, sent_until_refused, sent_until_stalled, wait_closed

DATA, HEADERS, RST_STREAM, SETTINGS_KIND, PING, GOAWAY, CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x9
END_HEADERS = 0x4
CANCEL, ENHANCE_YOUR_CALM = 0x8, 0xB
GROWTH_KIB = 32 * 1024  # the most a flood may add to the server's peak resident memory


@pytest.fixture(scope="module", params=["native", "native-on-loop"])
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[RuntimeProcess]:
    with serving(repository, request.param, []) as proc:
        yield proc


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _call_fields(address: str) -> list[tuple[str, str]]:
    return [(":method", "POST"), (":scheme", "http"), (":path", MODEL_INFER), (":authority", address),
            ("content-type", "application/grpc"), ("te", "trailers")]


def _calmed(sock: socket.socket) -> tuple[int, bytes]:
    """The last stream the server took and the reason it gave, from the GOAWAY ENHANCE_YOUR_CALM it ended the
    connection with (AssertionError if it did not, within LOADED seconds)."""
    received = wait_closed(sock, LOADED)  # what came before a reset too (the server closes with our bytes unread)
    goaways = [payload for kind, _, payload in frames(received) if kind == GOAWAY]
    assert goaways, f"closed without a GOAWAY: {frames(received)}"
    last, code = struct.unpack(">II", goaways[-1][:8])
    assert code == ENHANCE_YOUR_CALM, (code, goaways[-1][8:])
    return last & 0x7FFFFFFF, goaways[-1][8:]


def test_streams_reset_as_they_open_end_the_connection(server: RuntimeProcess) -> None:
    opened = 5000
    peak = memory_kib(server.pid)
    encoder = hpack.Encoder()
    fields = _call_fields(server.grpc_url)

    def chunks() -> Iterator[bytes]:
        yield PREFACE + SETTINGS
        for first in range(0, opened, 100):
            yield b"".join(_frame(HEADERS, END_HEADERS, 2 * n + 1, encoder.encode(fields))
                           + _frame(RST_STREAM, 0, 2 * n + 1, CANCEL.to_bytes(4, "big"))
                           for n in range(first, first + 100))

    with connect(server) as sock:
        sent_until_refused(sock, chunks())
        last, reason = _calmed(sock)
    assert last < 2 * opened - 1, f"every stream was taken ({reason!r})"
    assert memory_kib(server.pid) - peak < GROWTH_KIB
    still_serving(server)


def test_a_header_block_that_never_ends_ends_the_connection(server: RuntimeProcess) -> None:
    encoder = hpack.Encoder()
    peak = memory_kib(server.pid)

    def chunks() -> Iterator[bytes]:
        yield PREFACE + SETTINGS + _frame(HEADERS, 0, 1, encoder.encode(_call_fields(server.grpc_url)))
        for n in range(100_000):  # ~11 MB of header fields at most, in CONTINUATION frames with no END_HEADERS
            yield _frame(CONTINUATION, 0, 1, encoder.encode([(f"x-field-{n}", "v" * 100)]))

    with connect(server) as sock:
        sent = sent_until_refused(sock, chunks())
        _calmed(sock)
    assert sent < 8 << 20, f"{sent} bytes of one header block were read"
    assert memory_kib(server.pid) - peak < GROWTH_KIB
    still_serving(server)


def test_a_header_list_hpack_inflates_ends_the_connection(server: RuntimeProcess) -> None:
    """One 4,000-byte header field put in HPACK's table, then blocks that name it 12,000 times each (a byte or two a
    time): 48 MB of header list from 16 KB of bytes, ten times over."""
    encoder = hpack.Encoder()
    fields = _call_fields(server.grpc_url)
    big = ("x-big", "z" * 4000)
    peak = memory_kib(server.pid)

    def chunks() -> Iterator[bytes]:
        yield PREFACE + SETTINGS + _frame(HEADERS, END_HEADERS, 1, encoder.encode([*fields, big]))
        for n in range(1, 11):
            block = encoder.encode([*fields, *[big] * 12_000])
            assert len(block) <= 16_384, len(block)  # one frame of the default SETTINGS_MAX_FRAME_SIZE
            yield _frame(HEADERS, END_HEADERS, 2 * n + 1, block)

    with connect(server) as sock:
        sent_until_refused(sock, chunks())
        _calmed(sock)
    assert memory_kib(server.pid) - peak < GROWTH_KIB
    still_serving(server)


def test_data_frames_that_carry_nothing_end_the_connection(server: RuntimeProcess) -> None:
    encoder = hpack.Encoder()

    def chunks() -> Iterator[bytes]:
        yield PREFACE + SETTINGS + _frame(HEADERS, END_HEADERS, 1, encoder.encode(_call_fields(server.grpc_url)))
        for _ in range(1000):
            yield _frame(DATA, 0, 1) * 1000

    with connect(server) as sock:
        sent_until_refused(sock, chunks())
        _calmed(sock)
    still_serving(server)


@pytest.mark.parametrize("kind", [PING, SETTINGS_KIND], ids=["PING", "SETTINGS"])
def test_frames_whose_answers_are_never_read_stop_being_read(server: RuntimeProcess, kind: int) -> None:
    """PINGs (or SETTINGS) sent as fast as the socket takes them by a peer that reads nothing: once the server cannot
    write their answers it reads no more of them, so the peer's sends stall (within 256 MiB sent) and the server
    holds no more than its socket buffers; other clients are answered meanwhile."""
    payload = b"12345678" if kind == PING else struct.pack(">HI", 0x3, 100)  # SETTINGS_MAX_CONCURRENT_STREAMS
    burst = _frame(kind, 0, 0, payload) * 4096
    peak = memory_kib(server.pid)
    with connect(server) as sock:
        sock.sendall(PREFACE + SETTINGS)
        sent = sent_until_stalled(sock, burst)
        assert sent is not None, "256 MiB of frames read while their answers went unread"
        still_serving(server)  # the flooding connection open, stalled
    assert memory_kib(server.pid) - peak < GROWTH_KIB
    still_serving(server)
