"""Free GPU memory for the memory budget (`VersionLoader(device_free=...)`), from NVML; None without a GPU."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.gpu.nvml import Nvml, detect_gpus

log = logging.getLogger(__name__)

DeviceFree = Callable[[], int | None]


class NvmlDeviceFree:
    """Smallest free memory among the visible GPUs: a version that fits there fits on any of them.

    One NVML session for the runtime's life; a query that fails (a GPU fell off the bus) answers None, which the
    budget treats as "unknown" rather than "zero", and logs why.
    """

    def __init__(self, nvml: Nvml, inventory: GpuInventory) -> None:
        self._nvml = nvml
        self._inventory = inventory

    def __call__(self) -> int | None:
        try:
            return min(self._nvml.free_bytes(physical) for physical in self._inventory.physical)
        except Exception as exc:
            log.warning("GPU free memory query failed (%s); memory budget falls back to its byte limit", exc)
            return None

    def per_device(self) -> dict[int, int]:
        """Free bytes per visible CUDA ordinal."""
        return {ordinal: self._nvml.free_bytes(p) for ordinal, p in enumerate(self._inventory.physical)}

    def close(self) -> None:
        self._nvml.close()


def no_device_free() -> int | None:
    return None


def make_device_free(env: Mapping[str, str], nvml_module: Any | None = None) -> DeviceFree:
    """The `device_free` callable for VersionLoader: NVML-backed when a GPU is visible, else always None."""
    inventory, nvml = detect_gpus(env, nvml_module)
    if nvml is None:
        log.info("GPU memory: %s; the memory budget uses its byte limit only", inventory.detail)
        return no_device_free
    log.info("GPU memory: %s; the memory budget also checks free GPU memory", inventory.detail)
    return NvmlDeviceFree(nvml, inventory)
