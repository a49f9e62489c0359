"""Triton's GPU gauges from NVML, per visible GPU (label `gpu_uuid`): `nv_gpu_utilization` (0.0-1.0),
`nv_gpu_memory_total_bytes`, `nv_gpu_memory_used_bytes`, `nv_gpu_power_usage` and `nv_gpu_power_limit` (watts),
`nv_energy_consumption` (joules since the runtime started).

tritonserver reads them through DCGM every `--metrics-interval-ms`; here NVML is asked at each scrape. A query
a device does not support (power on some boards, anything on a GPU that fell off the bus) leaves that value out
for that scrape, and is logged once per device and gauge; the others are still written.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.gpu.nvml import Nvml, detect_gpus

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuReading:
    uuid: str
    values: Mapping[str, float]  # gauge name -> value; a gauge the device did not answer is absent


class GpuGauges:
    """The visible GPUs' gauges (one NVML session, the runtime's)."""

    def __init__(self, nvml: Nvml, inventory: GpuInventory) -> None:
        self._nvml = nvml
        self._devices: list[tuple[str, Any]] = []
        self._energy_at_start: dict[str, float] = {}
        self._warned: set[tuple[str, str]] = set()
        for physical in inventory.physical:
            handle = nvml.handle(physical)
            uuid = nvml.uuid(handle)
            self._devices.append((uuid, handle))
            start = self._ask(uuid, "nv_energy_consumption", functools.partial(nvml.energy_joules, handle))
            if start is not None:
                self._energy_at_start[uuid] = start

    def read(self) -> list[GpuReading]:
        readings = []
        for uuid, handle in self._devices:
            values: dict[str, float] = {}
            memory = self._ask(uuid, "nv_gpu_memory", functools.partial(self._nvml.memory, handle))
            if memory is not None:
                values["nv_gpu_memory_total_bytes"], values["nv_gpu_memory_used_bytes"] = memory
            for name, query in (("nv_gpu_utilization", self._nvml.utilization),
                                ("nv_gpu_power_usage", self._nvml.power_watts),
                                ("nv_gpu_power_limit", self._nvml.power_limit_watts)):
                value = self._ask(uuid, name, functools.partial(query, handle))
                if value is not None:
                    values[name] = value
            energy = self._ask(uuid, "nv_energy_consumption", functools.partial(self._nvml.energy_joules, handle))
            if energy is not None and uuid in self._energy_at_start:
                values["nv_energy_consumption"] = max(0.0, energy - self._energy_at_start[uuid])
            readings.append(GpuReading(uuid, values))
        return readings

    def close(self) -> None:
        self._nvml.close()

    def _ask(self, uuid: str, name: str, query: Callable[[], Any]) -> Any:
        try:
            return query()
        except Exception as exc:  # NVMLError_NotSupported, _GpuIsLost ... (pynvml makes these at run time)
            if (uuid, name) not in self._warned:
                self._warned.add((uuid, name))
                log.info("GPU %s: %s is not available (%s); left out of /metrics", uuid, name, exc)
            return None


def make_gpu_gauges(env: Mapping[str, str], nvml_module: Any | None = None) -> GpuGauges | None:
    """The gauges of the GPUs this process sees; None without one (or without NVML)."""
    inventory, nvml = detect_gpus(env, nvml_module)
    if nvml is None:
        return None
    try:
        return GpuGauges(nvml, inventory)
    except Exception as exc:
        log.warning("GPU metrics: NVML could not name the visible GPUs (%s); none written", exc)
        nvml.close()
        return None
