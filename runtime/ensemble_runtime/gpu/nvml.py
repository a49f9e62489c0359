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

    def free_bytes(self, physical: str) -> int:
        """Free memory of one device, named by NVML index ("0") or UUID ("GPU-...", "MIG-...")."""
        if physical.isdigit():
            handle = self._nvml.nvmlDeviceGetHandleByIndex(int(physical))
        else:
            handle = self._nvml.nvmlDeviceGetHandleByUUID(physical)
        return int(self._nvml.nvmlDeviceGetMemoryInfo(handle).free)

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
