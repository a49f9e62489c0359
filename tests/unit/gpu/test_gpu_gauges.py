"""Triton's GPU gauges from NVML (gpu/gauges.py) at the NVML seam, and how /metrics writes them.

A fake stands in for pynvml here (no GPU in CI); tests/gpu/test_gpu_metrics.py reads a real GPU's."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from ensemble_runtime.gpu.gauges import GpuGauges, make_gpu_gauges
from ensemble_runtime.metrics import build_metrics_registry
from ensemble_runtime.metrics_text import render
from ensemble_runtime.registry import Registry


class NotSupported(Exception):
    pass


@dataclass
class Memory:
    total: int
    used: int
    free: int = 0


@dataclass
class Rates:
    gpu: int


@dataclass
class FakeNvml:
    """Two GPUs; the second answers no power queries (as some boards do)."""

    energy_mj: dict[str, int] = field(default_factory=lambda: {"0": 5_000_000, "1": 1_000})
    shutdowns: int = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return str(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return f"GPU-{handle}aa".encode()

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Memory:
        return Memory(total=80 << 30, used=(int(handle) + 1) << 30)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Rates:
        return Rates(gpu=37 if handle == "0" else 0)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        if handle == "1":
            raise NotSupported("Not Supported")
        return 251_500

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> int:
        if handle == "1":
            raise NotSupported("Not Supported")
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return self.energy_mj[handle]


def test_each_visible_gpu_is_read_by_uuid(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml()
    with caplog.at_level(logging.INFO, logger="ensemble_runtime.gpu.gauges"):
        gauges = make_gpu_gauges({}, fake)
        assert isinstance(gauges, GpuGauges)
        fake.energy_mj["0"] += 12_500  # 12.5 J since start
        first, second = gauges.read()
        gauges.read()
    assert first.uuid == "GPU-0aa" and dict(first.values) == {
        "nv_gpu_memory_total_bytes": 80 << 30, "nv_gpu_memory_used_bytes": 1 << 30, "nv_gpu_utilization": 0.37,
        "nv_gpu_power_usage": 251.5, "nv_gpu_power_limit": 700.0, "nv_energy_consumption": 12.5}
    assert second.uuid == "GPU-1aa" and "nv_gpu_power_usage" not in second.values
    assert second.values["nv_gpu_utilization"] == 0.0 and second.values["nv_energy_consumption"] == 0.0
    # what a device cannot answer is said once per gauge, not at every scrape
    assert caplog.text.count("nv_gpu_power_usage is not available") == 1
    gauges.close()
    assert fake.shutdowns == 1


def test_only_the_visible_gpus_and_none_without_one() -> None:
    gauges = make_gpu_gauges({"CUDA_VISIBLE_DEVICES": "1"}, FakeNvml())
    assert gauges is not None and [r.uuid for r in gauges.read()] == ["GPU-1aa"]
    assert make_gpu_gauges({"NVIDIA_VISIBLE_DEVICES": "void"}, FakeNvml()) is None


def test_metrics_writes_them_as_triton_does() -> None:
    gauges = make_gpu_gauges({}, FakeNvml())
    text = render(build_metrics_registry(Registry(), gpus=gauges).collect()).decode()
    assert '# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n# TYPE nv_gpu_utilization gauge\n' in text
    assert 'nv_gpu_utilization{gpu_uuid="GPU-0aa"} 0.37\nnv_gpu_utilization{gpu_uuid="GPU-1aa"} 0\n' in text
    assert 'nv_gpu_memory_total_bytes{gpu_uuid="GPU-0aa"} 85899345920\n' in text
    assert 'nv_gpu_power_usage{gpu_uuid="GPU-0aa"} 251.5\n' in text and 'power_usage{gpu_uuid="GPU-1aa"}' not in text
    assert "# TYPE nv_energy_consumption counter\n" in text
