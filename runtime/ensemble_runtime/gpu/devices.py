"""Which GPUs this process can use, from CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES and NVML's count. Pure.

CUDA renumbers the devices a process sees as 0..n-1; `instance_group.gpus` uses those numbers (Triton's rule),
so the inventory is a count plus, for memory queries, what each visible ordinal is on the physical side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# NVIDIA_VISIBLE_DEVICES values under which the container runtime mounts no GPU
_NO_DEVICE_WORDS = frozenset({"", "void", "none"})


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """The GPUs a process sees: CUDA ordinals 0..count-1, and how each maps to an NVML device."""

    physical: tuple[str, ...]  # per visible ordinal: an NVML index ("2") or a UUID ("GPU-...", "MIG-...")
    detail: str  # where the answer came from, for log lines and error messages

    @property
    def count(self) -> int:
        return len(self.physical)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(range(len(self.physical)))


def parse_device_list(value: str) -> list[str]:
    """A CUDA_VISIBLE_DEVICES value as CUDA reads it: entries up to the first invalid one ("0,2,-1,3" -> 0, 2)."""
    out: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        if entry.lstrip("-").isdigit():
            if int(entry) < 0:
                break
            out.append(str(int(entry)))
        elif entry.upper().startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:
            break
    return out


def visible_gpus(env: Mapping[str, str], nvml_count: int | None, nvml_note: str = "") -> GpuInventory:
    """Combine the environment with NVML's device count (None when NVML is unusable) into the visible GPUs."""
    nvidia = env.get("NVIDIA_VISIBLE_DEVICES")
    if nvidia is not None and nvidia.strip().lower() in _NO_DEVICE_WORDS:
        return GpuInventory((), f"NVIDIA_VISIBLE_DEVICES={nvidia!r} mounts no GPU")
    if nvml_count is None:
        reason = nvml_note or "NVML is not available"
        return GpuInventory((), f"no GPU visible ({reason})")
    physical = [str(i) for i in range(nvml_count)]
    cuda = env.get("CUDA_VISIBLE_DEVICES")
    if cuda is None:
        return GpuInventory(tuple(physical), f"{nvml_count} GPU(s) reported by NVML")
    chosen: list[str] = []
    for entry in parse_device_list(cuda):
        if entry.isdigit() and int(entry) >= nvml_count:
            break  # CUDA stops at the first ordinal that does not exist
        if entry in chosen:
            break  # and at a repeated one
        chosen.append(entry)
    return GpuInventory(tuple(chosen), f"CUDA_VISIBLE_DEVICES={cuda!r} selects {len(chosen)} of {nvml_count} GPU(s)")
