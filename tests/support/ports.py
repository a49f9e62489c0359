"""Free loopback ports for test servers, chosen where no outgoing connection can take them first.

A port is chosen here and bound later by the server the test starts. Asking the kernel for one (binding port 0)
gives a port from its ephemeral range (`net.ipv4.ip_local_port_range`, 32768-60999 by default): the range it also
takes the source port of every outgoing connection from. Between the choice and the server's bind, any
connection on the machine (a kubelet to its API server, a client to MinIO) may take that port, and the server
then fails with "address already in use". That happened to kube-controller-manager on a loaded machine. So the
ports are chosen below the ephemeral range (and below Kubernetes' NodePort range, whose ports kube-proxy may
redirect), at random, each checked free by binding it: the kernel never hands those out to connections on its own.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10000  # below: ports that well-known services and their tests may use
NODE_PORTS = 30000  # Kubernetes' default NodePort range starts here (to 32767): kube-proxy may redirect those
ATTEMPTS = 200


def ephemeral_range(text: str | None) -> tuple[int, int]:
    """The kernel's ephemeral port range from the text of `ip_local_port_range` (Linux's default without it)."""
    try:
        low, high = (int(part) for part in (text or "").split())
    except ValueError:
        return 32768, 60999
    return low, high


def candidate_range(ephemeral: tuple[int, int]) -> range | None:
    """Where to choose ports: from LOWEST up to the ephemeral range (and the NodePort range), or above it; None
    if neither holds 1,000 ports (an ephemeral range that covers nearly everything: the kernel's choice it is)."""
    low, high = ephemeral
    below, above = range(LOWEST, min(low, NODE_PORTS)), range(high + 1, 65536)
    best = max(below, above, key=len)
    return best if len(best) >= 1000 else None


def _read_range() -> tuple[int, int]:
    try:
        return ephemeral_range(PORT_RANGE_FILE.read_text())
    except OSError:
        return ephemeral_range(None)


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that were free a moment ago (all held while choosing, so none
    twice), outside the ephemeral range where it can."""
    candidates = candidate_range(_read_range())
    chosen: list[int] = []
    with ExitStack() as held:
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            chosen.append(_bind_one(sock, candidates))
    return chosen


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range where it can."""
    return free_ports(1)[0]


def _bind_one(sock: socket.socket, candidates: Sequence[int] | None) -> int:
    if candidates is not None:
        pick = random.SystemRandom()  # not the shared generator, which a test may have seeded
        for _ in range(ATTEMPTS):
            port = pick.choice(candidates)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use (or held by this very call): another
                continue
            return port
    sock.bind(("127.0.0.1", 0))  # the kernel's choice, as a last resort
    return int(sock.getsockname()[1])
