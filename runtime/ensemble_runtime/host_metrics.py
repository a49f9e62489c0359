"""Triton's CPU gauges from /proc: `nv_cpu_utilization` (the share of the machine's CPU time not idle, 0.0-1.0),
`nv_cpu_memory_total_bytes` and `nv_cpu_memory_used_bytes` (MemTotal, and MemTotal less MemAvailable).

tritonserver samples them every `--metrics-interval-ms` (2 s); here utilization is measured over the time
between two scrapes (the first: since boot), so each scrape reports the average of the interval it covers.
Parsing is pure; `HostSampler` reads the files and keeps the previous CPU counters (one per collector).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HostValues:
    utilization: float
    memory_total_bytes: int
    memory_used_bytes: int


def cpu_counters(stat: str) -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat's `cpu` line; idle and iowait count as idle."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            try:
                values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            except ValueError:
                return None
            if len(values) < 5:
                return None
            total = sum(values)
            return total - values[3] - values[4], total
    return None


def memory_bytes(meminfo: str) -> tuple[int, int] | None:
    """(total, used) bytes from /proc/meminfo: MemTotal, and MemTotal less MemAvailable."""
    found: dict[str, int] = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            try:
                found[key] = int(rest.split()[0]) * 1024
            except (IndexError, ValueError):
                return None
    if len(found) != 2:
        return None
    return found["MemTotal"], max(0, found["MemTotal"] - found["MemAvailable"])


def utilization(previous: tuple[int, int] | None, current: tuple[int, int]) -> float:
    busy, total = current
    if previous is not None and total > previous[1]:
        busy, total = busy - previous[0], total - previous[1]
    return min(1.0, max(0.0, busy / total)) if total > 0 else 0.0


class HostSampler:
    """Reads the gauges; None where /proc does not have them (not Linux)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._last: tuple[int, int] | None = None

    def read(self) -> HostValues | None:
        try:
            counters = cpu_counters((self._proc / "stat").read_text())
            memory = memory_bytes((self._proc / "meminfo").read_text())
        except OSError:
            return None
        if counters is None or memory is None:
            return None
        share = utilization(self._last, counters)
        self._last = counters
        return HostValues(share, *memory)
