"""Pod IPs: one local address per pod, standing in for each pod's own network namespace.

The pods' processes share the host's network namespace, so two pods cannot both listen on 0.0.0.0:8000.
Instead every pod gets its own local address, reported as its podIP, and its processes bind that address:
tests and the endpoint slice controller see distinct pod IPs serving the same ports, as in a cluster.
The runtime is told its address (`runtime_address_args`); test commands bind `$(POD_IP)` from a fieldRef.
Programs that bind 0.0.0.0 on a fixed port still collide across pods.

The addresses come from a /24 that is made local as a whole, the way 127.0.0.0/8 is, by one route:
`ip route add local 10.250.0.0/24 dev lo` (needs CAP_NET_ADMIN; left in place on exit, it is harmless).
Loopback addresses (127.0.1.N) would need no route, but the API server refuses them in EndpointSlices
("may not be in the loopback range"), so they are only the fallback when the route cannot be added.
"""

from __future__ import annotations

import ipaddress
import logging
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_POD_CIDR = "10.250.0.0/24"
LOOPBACK_POD_CIDR = "127.0.1.0/24"


def ensure_local_route(cidr: str) -> bool:
    """Make every address of `cidr` local (bindable, routed to lo); False if that is not possible."""
    network = ipaddress.ip_network(cidr)
    if network.is_loopback:
        return True
    ip = shutil.which("ip", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if ip is None:
        return False
    shown = subprocess.run([ip, "route", "show", "table", "local", str(network)], capture_output=True, text=True)
    if shown.returncode == 0 and shown.stdout.strip():
        return True
    added = subprocess.run([ip, "route", "add", "local", str(network), "dev", "lo"], capture_output=True, text=True)
    if added.returncode != 0:
        log.warning("cannot make %s local (%s)", network, added.stderr.strip())
    return added.returncode == 0


def listening_addresses(proc_net_tcp: Path = Path("/proc/net/tcp")) -> set[str]:
    """IPv4 addresses something listens on (e.g. another stand-in's pods), from /proc/net/tcp."""
    out = set()
    for line in proc_net_tcp.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
            out.add(str(ipaddress.IPv4Address(bytes.fromhex(fields[1].split(":")[0])[::-1])))
    return out


class AddressPool:
    """Hands out the host addresses of `cidr` (but the first), one per pod UID, lowest free first;
    addresses something already listens on are skipped."""

    def __init__(self, cidr: str = DEFAULT_POD_CIDR) -> None:
        self.network = ipaddress.ip_network(cidr)
        self._lock = threading.Lock()
        self._by_uid: dict[str, str] = {}

    def allocate(self, uid: str) -> str:
        with self._lock:
            if uid in self._by_uid:
                return self._by_uid[uid]
            used = set(self._by_uid.values()) | listening_addresses()
            for host in list(self.network.hosts())[1:]:
                if str(host) not in used:
                    self._by_uid[uid] = str(host)
                    return str(host)
        raise RuntimeError(f"no free pod address in {self.network}")

    def release(self, uid: str) -> None:
        with self._lock:
            self._by_uid.pop(uid, None)


def runtime_address_args(pod_ip: str) -> list[str]:
    """Appended to the runtime container's args (argparse: the last value wins) to bind the pod's IP."""
    return [f"--grpc-address={pod_ip}", f"--http-address={pod_ip}", f"--metrics-address={pod_ip}"]
