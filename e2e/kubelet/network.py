"""Pod networks: each pod is a test host in its own network namespace, as in a cluster.

`ip netns add` per pod, a veth pair whose pod end is `eth0` with the pod IP, whose host end joins a bridge
that holds the CIDR's first address (the pods' gateway; the host reaches every pod through it). Pods
reach host services (S3 in the tests) at that gateway address. All of it lives inside this machine: the
bridge has no uplink. The API server refuses loopback addresses in EndpointSlices, which is why pods are
not simply given 127.0.1.N.
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


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("ip", path="/usr/sbin:/usr/bin:/sbin:/bin") or "ip"
    done = subprocess.run([tool, *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def gateway(cidr: str) -> str:
    """The CIDR's first address: held by the bridge on the host side; the pods' default gateway."""
    return str(next(ipaddress.ip_network(cidr).hosts()))


def bridge_name(cidr: str) -> str:
    network = ipaddress.ip_network(cidr)
    return f"e2ebr{int(network.network_address) & 0xFFFFFF:x}"[:15]


def netns_name(pod_ip: str) -> str:
    return "e2e-" + pod_ip.replace(".", "-")


def ensure_bridge(cidr: str) -> str:
    """Create (once) the bridge the pods of `cidr` hang off; returns the gateway address."""
    network = ipaddress.ip_network(cidr)
    # an older stand-in made the whole range local on lo: that would swallow the pods' traffic
    _ip("route", "del", "local", str(network), "dev", "lo", "table", "local", check=False)
    bridge = bridge_name(cidr)
    if _ip("link", "show", bridge, check=False).returncode != 0:
        _ip("link", "add", bridge, "type", "bridge")
    address = f"{gateway(cidr)}/{network.prefixlen}"
    if address not in _ip("-4", "addr", "show", bridge).stdout:
        _ip("addr", "add", address, "dev", bridge)
    _ip("link", "set", bridge, "up")
    return gateway(cidr)


def remove_bridge(cidr: str) -> None:
    _ip("link", "del", bridge_name(cidr), check=False)


def attach_pod(cidr: str, pod_ip: str) -> str:
    """The pod's network namespace with `pod_ip` on eth0, wired to the bridge; returns its name."""
    network = ipaddress.ip_network(cidr)
    ns = netns_name(pod_ip)
    detach_pod(pod_ip)
    _ip("netns", "add", ns)
    host_end = f"v{int(ipaddress.ip_address(pod_ip)) & 0xFFFFFF:x}"[:15]
    _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("link", "set", host_end, "master", bridge_name(cidr), "up")
    _ip("-n", ns, "addr", "add", f"{pod_ip}/{network.prefixlen}", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "route", "add", "default", "via", gateway(cidr))
    # `ip netns exec` mounts these over /etc: a resolver that answers at once (none, so lookups fail fast
    # instead of timing out against a nameserver the pod cannot reach), as the kubelet manages a pod's files
    etc = Path("/etc/netns") / ns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "resolv.conf").write_text("# e2e pod: no DNS\noptions timeout:1 attempts:1\n")
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n{pod_ip} {ns}\n")
    return ns


def detach_pod(pod_ip: str) -> None:
    """Remove the pod's namespace (its veth pair goes with it) and its /etc files."""
    _ip("netns", "del", netns_name(pod_ip), check=False)
    shutil.rmtree(Path("/etc/netns") / netns_name(pod_ip), ignore_errors=True)


class AddressPool:
    """Hands out the host addresses of `cidr` (but the first, the gateway), one per pod UID, lowest free first."""

    def __init__(self, cidr: str = DEFAULT_POD_CIDR) -> None:
        self.network = ipaddress.ip_network(cidr)
        self._lock = threading.Lock()
        self._by_uid: dict[str, str] = {}

    def allocate(self, uid: str) -> str:
        with self._lock:
            if uid in self._by_uid:
                return self._by_uid[uid]
            used = set(self._by_uid.values())
            for host in list(self.network.hosts())[1:]:
                if str(host) not in used:
                    self._by_uid[uid] = str(host)
                    return str(host)
        raise RuntimeError(f"no free pod address in {self.network}")

    def release(self, uid: str) -> None:
        with self._lock:
            self._by_uid.pop(uid, None)


def runtime_address_args(pod_ip: str) -> list[str]:
    """Appended to the runtime container's args (argparse: the last value wins): bind the pod's IP, as a
    pod would through its own eth0 (0.0.0.0 would do too, in the pod's namespace)."""
    return [f"--grpc-address={pod_ip}", f"--http-address={pod_ip}", f"--metrics-address={pod_ip}"]
