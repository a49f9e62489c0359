"""NVML through `pynvml` (nvidia-ml-py), imported lazily; absent or failing NVML means "no GPU", with a reason."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

from ensemble_runtime.gpu.devices import GpuInventory, visible_gpus

log = logging.getLogger(__name__)


class Nvml:
    """An initialised NVML (`module` is `pynvml` or anything with the same functions, e.g. a test fake)."""

    def __init__(self, module: Any) -> None:
        self._nvml = module

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def handle(self, physical: str) -> Any:
        """The NVML handle of one device, named by NVML index ("0") or UUID ("GPU-...", "MIG-...")."""
        if physical.isdigit():
            return self._nvml.nvmlDeviceGetHandleByIndex(int(physical))
        return self._nvml.nvmlDeviceGetHandleByUUID(physical)

    def free_bytes(self, physical: str) -> int:
        """Free memory of one device, named as `handle` names it."""
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self.handle(physical)).free)

    def uuid(self, handle: Any) -> str:
        value = self._nvml.nvmlDeviceGetUUID(handle)
        return value.decode() if isinstance(value, bytes) else str(value)

    def memory(self, handle: Any) -> tuple[int, int]:
        """(total, used) bytes."""
        info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.used)

    def utilization(self, handle: Any) -> float:
        """The share of the last sample period in which a kernel ran (0.0-1.0)."""
        return float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0

    def power_watts(self, handle: Any) -> float:
        return float(self._nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # milliwatts

    def power_limit_watts(self, handle: Any) -> float:
        return float(self._nvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0

    def energy_joules(self, handle: Any) -> float:
        return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1000.0  # millijoules

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception as exc:  # NVML errors are all NVMLError subclasses, which pynvml defines at run time
            log.debug("nvmlShutdown failed: %s", exc)


def open_nvml(module: Any | None = None) -> tuple[Nvml | None, str]:
    """(Nvml, "") when NVML answers, else (None, why not): package missing, no driver, no permission."""
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError:
            return None, "the nvidia-ml-py package (pynvml) is not installed; install the gpu extra"
    try:
        module.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / NoPermission ...
        return None, f"NVML could not start ({type(exc).__name__}: {exc}); is the NVIDIA driver mounted?"
    return Nvml(module), ""


def detect_gpus(env: Mapping[str, str], module: Any | None = None) -> tuple[GpuInventory, Nvml | None]:
    """Visible GPUs and the NVML handle to query them (None when NVML is unusable or nothing is visible)."""
    nvml, note = open_nvml(module)
    if nvml is None:
        return visible_gpus(env, None, note), None
    try:
        count = nvml.device_count()
    except Exception as exc:
        nvml.close()
        return visible_gpus(env, None, f"nvmlDeviceGetCount failed: {exc}"), None
    inventory = visible_gpus(env, count)
    if inventory.count == 0:
        nvml.close()
        return inventory, None
    return inventory, nvml
