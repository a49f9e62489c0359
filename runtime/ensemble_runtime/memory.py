"""The memory budget for loading a new version next to the old ones. Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class MemoryPolicy(enum.Enum):
    REFUSE = "refuse"  # a version that does not fit is not loaded; the old keeps serving
    DRAIN_THEN_SWAP = "drain-then-swap"  # unload the model's old versions first (NOT zero-downtime)


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    budget_bytes: int = 0  # 0 = no budget
    factor: float = 2.0  # bytes in memory per byte on disk
    policy: MemoryPolicy = MemoryPolicy.REFUSE

    def estimate(self, version_path: Path) -> int:
        size = sum(p.stat().st_size for p in version_path.rglob("*") if p.is_file())
        return int(size * self.factor)

    def fits(self, need: int, in_use: int, available: int | None = None) -> bool:
        """`available` is free device memory where a GPU is present; it bounds the budget further."""
        if available is not None and need > available:
            return False
        return not self.budget_bytes or in_use + need <= self.budget_bytes


def describe(need: int, in_use: int, budget: int, available: int | None = None) -> str:
    text = f"needs {need / 2**20:.1f} MiB, {in_use / 2**20:.1f} MiB in use of a {budget / 2**20:.1f} MiB budget"
    if available is not None:
        text += f", {available / 2**20:.1f} MiB free on the device"
    return text
