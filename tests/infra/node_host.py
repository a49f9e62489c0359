"""The host-wide side of the real node: one node per machine (a lock), and leaving the host as it was.

`sweep_host` removes everything a node run can leave behind, whether it stopped cleanly or crashed: its
processes (the daemons, containerd's shims, the containers' processes), the kubelet's and kube-proxy's
iptables chains and the bridge network's NAT chains, mounts under the node's trees, the bridge, the
kubelet's pod cgroups, the node's two trees and the few fixed paths the kubelet writes outside them. It
is idempotent; `RealNode` runs it before starting (stale state of a crashed run) and after stopping.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.infra.node_config import BRIDGE, CNI_NETWORK, NodeLayout

LOCK_PATH = Path("/run/ensemble-node.lock")
CGROUP_ROOT = Path("/sys/fs/cgroup")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
# Written by the kubelet whatever its --root-dir (device manager socket dir, container log symlinks) and by
# containerd's CNI library (its result cache).
KUBELET_FIXED_DIR = Path("/var/lib/kubelet")
DEVICE_PLUGINS_DIR = KUBELET_FIXED_DIR / "device-plugins"
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CNI_RESULTS = Path("/var/lib/cni/results")


class HostBusy(RuntimeError):
    """Another real node holds the machine."""


@contextlib.contextmanager
def host_lock(timeout: float, path: Path = LOCK_PATH) -> Iterator[None]:
    """Hold the machine-wide real-node lock (flock; the kernel drops it if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = path.read_text().strip() or "unknown"
                    raise HostBusy(f"another real node holds {path} (pid {holder}) after {timeout:.0f}s") from None
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def primary_ipv4() -> str:
    """The source address of the default route: what pods can reach the host (and the API server) at."""
    out = subprocess.run(["ip", "-4", "route", "get", "192.0.2.123"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"\bsrc (\d+\.\d+\.\d+\.\d+)", out)
    if match is None:
        raise RuntimeError(f"no IPv4 source address in `ip route get`: {out!r}")
    return match.group(1)


# ---------------------------------------------------------------- processes


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def node_processes(layout: NodeLayout) -> list[int]:
    """Processes started for the node: daemons and shims name one of its trees on their command line;
    containers' processes are in the kubelet's pod cgroups."""
    markers = (str(layout.root), str(layout.state))
    own = os.getpid()
    found = {pid for pid in _pids() if pid != own and any(m in _cmdline(pid) for m in markers)}
    for procs in _pod_cgroup_files("cgroup.procs"):
        with contextlib.suppress(OSError):
            found.update(int(line) for line in procs.read_text().split())
    found.discard(own)
    return sorted(found)


def kill_node_processes(layout: NodeLayout, timeout: float = 30.0) -> list[int]:
    """SIGKILL every node process until none is left; returns the pids found the first time."""
    first = node_processes(layout)
    deadline = time.monotonic() + timeout
    pids = first
    while pids:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= deadline:
            raise RuntimeError(f"node processes survive SIGKILL: {[(p, _cmdline(p)) for p in pids]}")
        time.sleep(0.2)
        pids = [pid for pid in node_processes(layout) if _alive(pid)]
    return first


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ---------------------------------------------------------------- cgroups


def _pod_cgroup_roots() -> list[Path]:
    if not CGROUP_ROOT.is_dir():
        return []
    return [d / "kubepods" for d in CGROUP_ROOT.iterdir() if (d / "kubepods").is_dir()]


def _pod_cgroup_files(name: str) -> Iterator[Path]:
    for root in _pod_cgroup_roots():
        yield from root.rglob(name)


def remove_pod_cgroups() -> None:
    """rmdir the kubelet's kubepods trees (deepest first) in every cgroup hierarchy."""
    for root in _pod_cgroup_roots():
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for directory in [*dirs, root]:
            with contextlib.suppress(OSError):
                directory.rmdir()


# ---------------------------------------------------------------- iptables


def _iptables(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "-w", "5", *args], capture_output=True, text=True, check=False)


def _chain_is_ours(name: str, rules: list[str]) -> bool:
    if name.startswith("KUBE-"):
        return True
    # The bridge plugin's masquerade chains: CNI-<hash>, every rule commented with our network's name.
    marker = f'name: \\"{CNI_NETWORK}\\"'
    return name.startswith("CNI-") and bool(rules) and all(marker in rule for rule in rules)


def node_chains(binary: str = "iptables") -> dict[str, list[str]]:
    """{table: [chain]} of the node's chains still present (KUBE-*, our CNI-* chains)."""
    found: dict[str, list[str]] = {}
    for table in IPTABLES_TABLES:
        listing = _iptables(binary, "-t", table, "-S")
        if listing.returncode != 0:
            continue
        chains: dict[str, list[str]] = {}
        for line in listing.stdout.splitlines():
            parts = line.split(" ", 2)
            if parts[0] == "-N":
                chains.setdefault(parts[1], [])
            elif parts[0] == "-A" and len(parts) > 1:
                chains.setdefault(parts[1], []).append(line)
        ours = [name for name, rules in chains.items() if _chain_is_ours(name, rules)]
        if ours:
            found[table] = ours
    return found


def remove_node_chains(binary: str = "iptables") -> None:
    """Delete the jumps into the node's chains from every other chain, then flush and delete those."""
    for table, chains in node_chains(binary).items():
        ours = set(chains)
        listing = _iptables(binary, "-t", table, "-S").stdout.splitlines()
        for line in listing:
            parts = line.split()
            if len(parts) > 1 and parts[0] == "-A" and parts[1] not in ours:
                target = parts[parts.index("-j") + 1] if "-j" in parts else ""
                if target in ours:
                    # -S quotes comments; let the shell's rules undo the quoting exactly.
                    subprocess.run(
                        f"{binary} -w 5 -t {table} -D {line[3:]}", shell=True, capture_output=True, check=False
                    )
        for chain in chains:
            _iptables(binary, "-t", table, "-F", chain)
        for chain in chains:
            _iptables(binary, "-t", table, "-X", chain)


# ---------------------------------------------------------------- mounts and paths


def mounts_under(*trees: Path) -> list[Path]:
    """Mount points under `trees` (from /proc/self/mountinfo), deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if any(point == str(t) or point.startswith(f"{t}/") for t in trees):
            points.append(Path(point))
    return sorted(set(points), key=lambda p: len(p.parts), reverse=True)


def unmount_all(*trees: Path) -> None:
    for _ in range(5):  # stacked mounts: unmount until nothing is left
        points = mounts_under(*trees)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    left = mounts_under(*trees)
    if left:
        raise RuntimeError(f"mounts left under {trees}: {left}")


def sandbox_ids(layout: NodeLayout) -> set[str]:
    """Ids of the pod sandboxes containerd knows (its CRI metadata and its shims' task directories)."""
    ids: set[str] = set()
    for directory in (
        layout.containerd_root / "io.containerd.grpc.v1.cri" / "sandboxes",
        layout.containerd_state / "io.containerd.runtime.v2.task" / "k8s.io",
    ):
        if directory.is_dir():
            ids.update(entry.name for entry in directory.iterdir())
    return ids


def remove_cni_results(ids: set[str]) -> None:
    """containerd's CNI library caches each attachment's result in /var/lib/cni/results, named after the
    network and the sandbox (`<network>-<sandbox id>-<interface>`): ours, and its built-in loopback's."""
    if not CNI_RESULTS.is_dir():
        return
    for result in CNI_RESULTS.iterdir():
        if result.name.startswith(f"{CNI_NETWORK}-") or any(f"-{i}-" in result.name for i in ids):
            result.unlink()


def remove_fixed_paths(layout: NodeLayout) -> None:
    shutil.rmtree(DEVICE_PLUGINS_DIR, ignore_errors=True)
    with contextlib.suppress(OSError):
        KUBELET_FIXED_DIR.rmdir()  # only if the kubelet's own fixed directory is now empty
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(layout.pod_logs)):
                link.unlink()


def sweep_host(layout: NodeLayout) -> list[str]:
    """Remove every trace of a node run; returns what was found (empty after a clean stop)."""
    found: list[str] = []
    pids = kill_node_processes(layout)
    if pids:
        found.append(f"processes {pids}")
    remove_pod_cgroups()
    for binary in ("iptables", "ip6tables"):
        chains = node_chains(binary)
        if chains:
            found.append(f"{binary} chains {chains}")
            remove_node_chains(binary)
    mounts = mounts_under(layout.root, layout.state)
    if mounts:
        found.append(f"{len(mounts)} mounts")
        unmount_all(layout.root, layout.state)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    remove_cni_results(sandbox_ids(layout))
    for tree in (layout.root, layout.state):
        if tree.exists():
            shutil.rmtree(tree, ignore_errors=True)
    remove_fixed_paths(layout)
    return found
