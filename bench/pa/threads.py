"""Where a server's time per request goes, thread by thread: CPU time (user and system) and context switches
(voluntary: it slept; involuntary: it was preempted) of each thread of one process, from /proc/<pid>/task,
sampled around a run and divided by the requests the server completed in it.

For our runtime the threads are the event loop (the main thread), the protocol core's threads (`grpc-core`,
`http-core`) and one per python model instance; the switch counts show how often work is handed between them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.pa.cpu import stat_fields


@dataclass(frozen=True, slots=True)
class ThreadSample:
    """One thread's counters at one moment (CPU in clock ticks)."""

    name: str
    user_ticks: int
    system_ticks: int
    voluntary: int
    involuntary: int


def parse_thread(stat: str, status: str) -> ThreadSample:
    """A thread's counters from the text of its /proc `stat` and `status` files (proc(5))."""
    name = stat.rpartition(")")[0].partition("(")[2]
    fields = stat_fields(stat)
    counts = {key: int(value) for key, _, value in (line.partition(":") for line in status.splitlines())
              if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")}
    return ThreadSample(name, int(fields[11]), int(fields[12]), counts.get("voluntary_ctxt_switches", 0),
                        counts.get("nonvoluntary_ctxt_switches", 0))


def sample(pid: int) -> dict[int, ThreadSample]:
    """Thread id -> counters, for every thread of `pid` still there (threads that end meanwhile are skipped)."""
    threads: dict[int, ThreadSample] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return threads
    for task in tasks:
        try:
            threads[int(task.name)] = parse_thread((task / "stat").read_text(), (task / "status").read_text())
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return threads


def per_request(
    pid: int, before: Mapping[int, ThreadSample], after: Mapping[int, ThreadSample], requests: int,
    ticks_per_second: int | None = None,
) -> list[dict[str, Any]]:
    """Per thread that was there before and after and did anything: microseconds of user and system CPU and
    context switches per request; the main thread (the event loop in ours) is named `main`."""
    if requests <= 0:
        return []
    us_per_tick = 1e6 / (ticks_per_second or os.sysconf("SC_CLK_TCK"))
    rows: list[dict[str, Any]] = []
    for tid, end in sorted(after.items()):
        start = before.get(tid)
        if start is None:
            continue
        delta = (end.user_ticks - start.user_ticks, end.system_ticks - start.system_ticks,
                 end.voluntary - start.voluntary, end.involuntary - start.involuntary)
        if not any(delta):
            continue
        rows.append({
            "thread": "main" if tid == pid else f"{end.name}/{tid}",
            "user_us": round(delta[0] * us_per_tick / requests, 1),
            "system_us": round(delta[1] * us_per_tick / requests, 1),
            "voluntary_switches": round(delta[2] / requests, 2),
            "involuntary_switches": round(delta[3] / requests, 2),
        })
    return rows


def lines(label: str, rows: list[dict[str, Any]]) -> list[str]:
    """The rows as printed under a point, with their total."""
    out = [f"    {label} {row['thread']:<24} user {row['user_us']:>6} us  sys {row['system_us']:>6} us  "
           f"switches {row['voluntary_switches']:>5} + {row['involuntary_switches']:>5} (slept + preempted) "
           "per request" for row in rows]
    if rows:
        total = {key: round(sum(row[key] for row in rows), 2)
                 for key in ("user_us", "system_us", "voluntary_switches", "involuntary_switches")}
        out.append(f"    {label} {'all threads':<24} user {total['user_us']:>6} us  sys {total['system_us']:>6} us  "
                   f"switches {total['voluntary_switches']:>5} + {total['involuntary_switches']:>5}")
    return out
