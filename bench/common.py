"""Shared helpers for the benchmarks: percentiles, a closed-loop load generator, JSON output."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summarize(latencies_s: list[float], wall_s: float) -> dict[str, float]:
    us = [x * 1e6 for x in latencies_s]
    return {
        "requests": len(us),
        "p50_us": round(percentile(us, 50), 1),
        "p99_us": round(percentile(us, 99), 1),
        "mean_us": round(statistics.fmean(us), 1),
        "throughput_rps": round(len(us) / wall_s, 1),
    }


async def closed_loop(call: Callable[[], Awaitable[object]], concurrency: int, duration_s: float,
                      warmup_s: float = 0.5) -> dict[str, float]:
    """`concurrency` workers each issue a request as soon as the last returns, for `duration_s`."""
    latencies: list[float] = []
    start = time.perf_counter()
    measure_from = start + warmup_s
    stop_at = measure_from + duration_s

    async def worker() -> None:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            await call()
            t1 = time.perf_counter()
            if t0 >= measure_from:
                latencies.append(t1 - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return summarize(latencies, duration_s)


def write_json(name: str, payload: object, path: Path | None = None) -> Path:
    """`payload` as bench/results/<name>.json, or at `path` (a benchmark's --json) where given."""
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
    return path
