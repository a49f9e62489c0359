"""Triton's CPU gauges from /proc (host_metrics.py): parsing, and utilization between two reads."""

from __future__ import annotations

from pathlib import Path

from ensemble_runtime.host_metrics import HostSampler, HostValues, cpu_counters, memory_bytes, utilization

MEMINFO = "MemTotal:       24683652 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\nBuffers: 1 kB\n"


def _stat(user: int, idle: int, iowait: int = 0) -> str:
    return f"cpu  {user} 0 0 {idle} {iowait} 0 0 0 0 0\ncpu0 {user} 0 0 {idle} {iowait} 0 0 0 0 0\nctxt 5\n"


def test_parsing() -> None:
    assert cpu_counters(_stat(300, 600, 100)) == (300, 1000)  # iowait counts as idle
    assert cpu_counters("intr 1\n") is None
    assert cpu_counters("cpu  a b c d e\n") is None
    assert memory_bytes(MEMINFO) == (24683652 * 1024, (24683652 - 20000000) * 1024)
    assert memory_bytes("MemTotal: 5 kB\n") is None


def test_utilization_is_measured_between_reads() -> None:
    assert utilization(None, (250, 1000)) == 0.25  # the first: since boot
    assert utilization((250, 1000), (1250, 2000)) == 1.0
    assert utilization((250, 1000), (250, 1000)) == 0.25  # no time passed: the counters' own share


def test_the_sampler_reads_proc(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "stat").write_text(_stat(100, 300))
    sampler = HostSampler(tmp_path)
    first = sampler.read()
    assert first == HostValues(0.25, 24683652 * 1024, (24683652 - 20000000) * 1024)
    (tmp_path / "stat").write_text(_stat(100 + 90, 300 + 10))
    second = sampler.read()
    assert second is not None and second.utilization == 0.9
    assert HostSampler(tmp_path / "missing").read() is None
