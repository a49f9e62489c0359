"""One gRPC call with bytes no gRPC library would send: any headers (a `grpc-encoding` nobody speaks) and any
length-prefixed frames (a compressed flag over bytes that do not inflate), over a real HTTP/2 connection (h2, the
protocol state machine; the socket is ours). Returns the call's status as the server wrote it in its trailers."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events

GOAWAY = 0x7  # the HTTP/2 frame type
REFUSED_STREAM = 0x7  # the HTTP/2 error code: the stream was not processed (a client may send it again)


@dataclass(frozen=True)
class RawAnswer:
    status: int  # grpc-status (0 OK)
    message: str  # grpc-message, percent-decoded
    data: bytes  # the response's DATA, length prefixes included
    fields: dict[str, str]  # the response's headers and trailers


def frame(message: bytes, compressed: bool = False) -> bytes:
    """A gRPC length-prefixed message: the compressed flag, the length (big-endian), the bytes."""
    return struct.pack(">BI", 1 if compressed else 0, len(message)) + message


def call(address: str, method: str, frames: Sequence[bytes], headers: Sequence[tuple[str, str]] = (),
         timeout: float = 30.0) -> RawAnswer:
    """POST `frames` (already framed, see `frame`) to `method` on `address` (host:port) and read the answer."""
    with RawConnection(address, timeout) as connection:
        return connection.call(method, frames, headers)


def messages(data: bytes) -> list[bytes]:
    """The messages of a call's DATA (each length-prefixed, as `frame` writes them)."""
    found = []
    while data:
        _, length = struct.unpack(">BI", data[:5])
        found.append(data[5:5 + length])
        data = data[5 + length:]
    return found


class RawConnection:
    """One HTTP/2 connection to `address`, opened (preface and SETTINGS sent) on entering; calls one at a time."""

    def __init__(self, address: str, timeout: float = 30.0, source: str = "") -> None:
        """`source`: the local address to connect from (any loopback address on Linux; "": the system's choice)."""
        self.address = address
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout, source_address=(source, 0))
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self._heads: dict[int, dict[str, str]] = {}  # response headers `opened` read before they were asked for
        self._unread = b""  # received bytes of a frame not yet whole
        # the GOAWAY frames received, (last stream id, error code) each: kept from h2, which takes the first as the
        # connection's end (it would refuse the answers of the calls the server goes on finishing)
        self.goaways: list[tuple[int, int]] = []

    def __enter__(self) -> RawConnection:
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def call(self, method: str, frames: Sequence[bytes], headers: Sequence[tuple[str, str]] = ()) -> RawAnswer:
        stream = self.open_call(method, headers)
        self._send_body(stream, b"".join(frames))
        return self.answer(stream)

    def open_call(self, method: str, headers: Sequence[tuple[str, str]] = ()) -> int:
        """Sends a call's HEADERS and nothing more; returns its stream (its message may follow: `send`)."""
        return self.open_calls(method, 1, headers)[0]

    def open_calls(self, method: str, count: int, headers: Sequence[tuple[str, str]] = ()) -> list[int]:
        """`open_call` `count` times, the HEADERS all in one write (the server reads them together); their streams,
        in the order sent."""
        streams = []
        for _ in range(count):
            stream = self.conn.get_next_available_stream_id()
            self.conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", method),
                                            (":authority", self.address), ("content-type", "application/grpc"),
                                            ("te", "trailers"), *headers])
            streams.append(stream)
        self.sock.sendall(self.conn.data_to_send())
        return streams

    def send(self, stream: int, frames: Sequence[bytes]) -> RawAnswer:
        """Sends the message of a call opened by `open_call`, ending its requests, and reads its answer."""
        self.start(stream, frames)
        return self.answer(stream)

    def start(self, stream: int, frames: Sequence[bytes]) -> None:
        """Sends the message of a call opened by `open_call`, ending its requests; its answer is read by `answer`."""
        self._send_body(stream, b"".join(frames))

    def more(self, stream: int, frames: Sequence[bytes]) -> None:
        """Sends more messages on a call opened by `open_call`, leaving its requests open (a stream's; each small
        enough for the window)."""
        self.conn.send_data(stream, b"".join(frames), end_stream=False)
        self.sock.sendall(self.conn.data_to_send())

    def opened(self, stream: int) -> dict[str, str]:
        """Reads until the response headers of `stream` (the server took the call); returns them. Headers of
        other calls read meanwhile are kept for their own `opened`; nothing else may arrive meanwhile."""
        while stream not in self._heads:
            for event in self._receive("the server closed the connection before answering the call's headers"):
                if isinstance(event, h2.events.ResponseReceived):
                    self._heads[event.stream_id] = {str(k): str(v) for k, v in event.headers}
            self.sock.sendall(self.conn.data_to_send())
        return self._heads.pop(stream)

    def answer(self, stream: int) -> RawAnswer:
        """The answer of a call `start` sent (read until it ends)."""
        fields: dict[str, str] = {}
        data = bytearray()
        while True:
            for event in self._receive(f"the connection closed before the call ended; headers so far {fields}"):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    fields.update((str(k), str(v)) for k, v in event.headers)
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                    data += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    raise StreamResetError(event.error_code)
                if isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    self.sock.sendall(self.conn.data_to_send())
                    return RawAnswer(int(fields.get("grpc-status", "-1")), unquote(fields.get("grpc-message", "")),
                                     bytes(data), fields)
            self.sock.sendall(self.conn.data_to_send())

    def ended(self, streams: int, timeout: float) -> dict[int, RawAnswer]:
        """Reads until `streams` calls have ended (or `timeout` passes): the answer of each, by stream."""
        fields: dict[int, dict[str, str]] = {}
        answers: dict[int, RawAnswer] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < streams and (left := deadline - time.monotonic()) > 0:
            if not select.select([self.sock], [], [], left)[0]:
                break
            for event in self._receive(f"the server closed the connection; answers so far {answers}"):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    fields.setdefault(event.stream_id, {}).update((str(k), str(v)) for k, v in event.headers)
                elif isinstance(event, h2.events.StreamEnded):
                    got = fields.get(event.stream_id, {})
                    answers[event.stream_id] = RawAnswer(int(got.get("grpc-status", "-1")),
                                                         unquote(got.get("grpc-message", "")), b"", got)
            self.sock.sendall(self.conn.data_to_send())
        return answers

    def cancel(self, stream: int) -> None:
        """Ends a call from the client's side (RST_STREAM, CANCEL)."""
        self.conn.reset_stream(stream, error_code=h2.errors.ErrorCodes.CANCEL)
        self.sock.sendall(self.conn.data_to_send())

    def goaway(self, timeout: float) -> tuple[int, int]:
        """Reads until the server's first GOAWAY (or `timeout` passes: TimeoutError): its last stream id and error
        code. What else arrives meanwhile is taken by h2 but not acknowledged: the PING a graceful GOAWAY comes
        with stays unanswered, so the server sends no second GOAWAY (the streams it took) before this client's
        next call."""
        deadline = time.monotonic() + timeout
        while not self.goaways:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError("no GOAWAY from the server")
            self._receive("the server closed the connection without a GOAWAY")
        self.conn.data_to_send()  # the PING's acknowledgement, dropped
        return self.goaways[0]

    def idle(self, seconds: float) -> int:
        """Reads for `seconds` without calling, acknowledging what the server sends (h2 answers PINGs); returns
        the PINGs acknowledged. ConnectionError if the server closes the connection meanwhile."""
        pings = 0
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                break
            events = self._receive(f"the server closed the connection after {pings} PINGs")
            pings += sum(isinstance(e, h2.events.PingReceived) for e in events)
            self.sock.sendall(self.conn.data_to_send())
        return pings

    def _send_body(self, stream: int, body: bytes) -> None:
        """The body in DATA frames as flow control lets them out (the server's window updates read meanwhile; an
        answer that ends the call before the body is sent stops the sending)."""
        view = memoryview(body)
        while True:
            room = min(self.conn.local_flow_control_window(stream), self.conn.max_outbound_frame_size, len(view))
            if room or not view:
                self.conn.send_data(stream, view[:room].tobytes(), end_stream=room == len(view))
                self.sock.sendall(self.conn.data_to_send())
                view = view[room:]
                if not view:
                    return
                continue
            for event in self._receive("the connection closed while the request was being sent"):
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)) and event.stream_id == stream:
                    raise ConnectionError(f"the server ended the call before the request was sent ({event!r})")
            self.sock.sendall(self.conn.data_to_send())

    def _receive(self, closed: str) -> list[h2.events.Event]:
        """One read's events (ConnectionError `closed` if the server closed the connection); its GOAWAY frames go
        to `goaways`, not to h2."""
        received = self.sock.recv(65536)
        if not received:
            raise ConnectionError(closed)
        self._unread += received
        passed = bytearray()
        while len(self._unread) >= 9:
            length = int.from_bytes(self._unread[:3], "big")
            if len(self._unread) < 9 + length:
                break
            whole, self._unread = self._unread[:9 + length], self._unread[9 + length:]
            if whole[3] == GOAWAY:
                last, code = struct.unpack(">II", whole[9:17])
                self.goaways.append((last & 0x7FFFFFFF, code))
            else:
                passed += whole
        return self.conn.receive_data(bytes(passed)) if passed else []


class StreamResetError(ConnectionError):
    """The server reset the call's stream (RST_STREAM) with `error_code`."""

    def __init__(self, error_code: int) -> None:
        super().__init__(f"the server reset the stream (error code {error_code})")
        self.error_code = error_code
