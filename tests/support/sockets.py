"""Watching a server's side of a raw connection: whether it has closed it, and waiting until it does; sending on one
until the server refuses more or stops reading."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterable

LOADED = 30.0  # how late an answer or a close may come on a loaded 2-core machine


def wait_closed(sock: socket.socket, timeout: float) -> bytes:
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
    raise AssertionError(f"the connection is still open after {timeout} s; received {bytes(received)!r}")


def is_open(sock: socket.socket) -> bool:
    """Whether the server has not closed `sock` (what it sent meanwhile is read and dropped)."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return False
    except BlockingIOError:
        return True
    except ConnectionError:
        return False
    finally:
        sock.settimeout(LOADED)


def _tcp_table() -> list[list[str]]:
    """The rows of /proc/net/tcp, split: [1] the local address, [2] the remote one (each `ADDR:PORT`, the address
    little-endian, in hex), [3] the state."""
    with open("/proc/net/tcp", encoding="ascii") as table:
        return [line.split() for line in table.readlines()[1:]]


def server_keeps(sock: socket.socket) -> bool:
    """Whether the server's end of `sock` (a loopback IPv4 connection) is still an open connection: its socket in
    /proc/net/tcp, ESTABLISHED. A server that closes it while answers wait in its send buffer leaves it in
    FIN_WAIT1 (or gone, after a reset) without the client reading anything: closed, seen from outside."""
    server_host, server_port = sock.getpeername()[:2]
    client_host, client_port = sock.getsockname()[:2]

    def address(host: str, port: int) -> str:  # as /proc/net/tcp writes it
        return f"{int.from_bytes(socket.inet_aton(host), 'little'):08X}:{port:04X}"

    local, remote = address(server_host, server_port), address(client_host, client_port)
    for fields in _tcp_table():
        if fields[1] == local and fields[2] == remote:
            return fields[3] == "01"  # ESTABLISHED
    return False


def wait_server_closed(sock: socket.socket, timeout: float) -> None:
    """Waits until the server has closed its end of `sock` (`server_keeps`), reading nothing from it."""
    deadline = time.monotonic() + timeout
    while server_keeps(sock):
        assert time.monotonic() < deadline, f"the server still keeps the connection after {timeout} s"
        time.sleep(0.05)


def wait_port_settled(port: int, timeout: float) -> None:
    """Waits until the server listening on loopback `port` has closed every connection its client closed (none of
    the server's ends in CLOSE_WAIT in /proc/net/tcp): whatever those connections held on the server is free."""
    suffix = f":{port:04X}"
    deadline = time.monotonic() + timeout
    while waiting := [fields for fields in _tcp_table() if fields[1].endswith(suffix) and fields[3] == "08"]:
        assert time.monotonic() < deadline, f"the server has not closed {len(waiting)} closed connections"
        time.sleep(0.05)  # CLOSE_WAIT: the server has not closed its end yet


def sent_until_stalled(sock: socket.socket, burst: bytes, cap: int = 256 << 20, stall: float = 5.0) -> int | None:
    """Sends `burst` over and over, reading nothing back, until one send waits `stall` seconds (the server has
    stopped reading) or `cap` bytes have gone; the bytes sent before the stall, None if there was none. The socket's
    receive buffer is made small first, so that the server's unread answers fill it soon."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(stall)
    sent = 0
    while sent < cap:
        try:
            sock.sendall(burst)
        except TimeoutError:
            return sent
        sent += len(burst)
    return None


def sent_until_refused(sock: socket.socket, chunks: Iterable[bytes]) -> int:
    """Sends `chunks` until they run out or the server has closed the connection; the bytes sent."""
    sent = 0
    try:
        for chunk in chunks:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent
