"""Watching a server's side of a raw connection: whether it has closed it, and waiting until it does."""

from __future__ import annotations

import select
import socket
import time

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
