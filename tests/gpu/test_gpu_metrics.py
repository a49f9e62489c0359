"""Triton's GPU gauges on a real GPU: the runtime's /metrics names every visible GPU by its UUID, with NVML's
total memory, a used amount below it and a utilization share (skipped without NVML and a GPU)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from ensemble_runtime.gpu.nvml import open_nvml

from tests.support.runtime_process import RuntimeProcess


def test_each_gpu_is_on_metrics(tmp_path: Path) -> None:
    nvml, reason = open_nvml()
    if nvml is None:
        pytest.skip(reason)
    try:
        count = nvml.device_count()
        if not count:
            pytest.skip("NVML sees no GPU")
        totals = {nvml.uuid(nvml.handle(str(i))): nvml.memory(nvml.handle(str(i)))[0] for i in range(count)}
    finally:
        nvml.close()
    (tmp_path / "repo").mkdir()
    with RuntimeProcess([tmp_path / "repo"]) as proc:
        proc.wait_ready()
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    samples = {(m[0], m[1]): float(m[2]) for m in re.findall(r'^(nv_\w+)\{gpu_uuid="([^"]+)"\} (\S+)$', text, re.M)}
    for uuid, total in totals.items():
        assert samples[("nv_gpu_memory_total_bytes", uuid)] == total
        assert 0 <= samples[("nv_gpu_memory_used_bytes", uuid)] <= total
        assert 0.0 <= samples[("nv_gpu_utilization", uuid)] <= 1.0
