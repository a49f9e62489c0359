"""The Linux scheduling policy of the runtime's threads (`--thread-policy`).

A request is handed from thread to thread: the native core's thread to the event loop, the loop to a model
instance's thread and back, the reply to the core's thread. Under the default policy (SCHED_OTHER) the thread
a hand-off wakes preempts the thread that woke it, mid-batch, on a busy core: the woken thread then mostly
waits for the GIL its waker holds, or takes one call where it would have taken several, and each hand-off
costs two context switches more. SCHED_BATCH (sched(7)) keeps the same fair share and nice value; only a
thread it wakes does not preempt: it runs when the waker blocks or its slice ends. Measured with
perf_analyzer, one core, concurrency 16: the event loop is preempted about once per request under SCHED_OTHER
and about once per ten under SCHED_BATCH, and the server spends ~10% less CPU per request (bench/README.md).

But a thread under SCHED_BATCH does not preempt anything when it wakes, a process of someone else's included:
where another process keeps the same CPU busy, each wake-up of a runtime thread (a request arriving on a socket
among them) waits for that process's slice to end, a scheduler tick. Measured with perf_analyzer, one core
shared with a busy loop, concurrency 1: p50 about 4 ms under SCHED_BATCH against 0.4-0.6 ms under the default
policy (Triton's too). The native cores' threads now wait for the next request under the default policy whenever
every call is answered (runtime/native/src/idle_policy.rs), which brings that case back to 0.4-0.6 ms. But a
request that arrives while others are in flight, or a model thread woken by a GPU that finished, still waits for
the busy neighbour's slice. So SCHED_BATCH is for a runtime that has its CPUs to itself (pinned, or a node with
nothing else busy); the default keeps the policy the process was started with.

"inherit" (the default) leaves the policy the process was started with; "batch" sets every thread of the
process to SCHED_BATCH when the runtime starts (threads started later inherit it from the thread that starts
them). Any user may choose SCHED_BATCH: no privilege or capability is needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

BATCH = "batch"
INHERIT = "inherit"
CHOICES = (BATCH, INHERIT)


def thread_ids(task_dir: str = "/proc/self/task") -> list[int]:
    """The ids of this process's threads now (Linux): the main thread's id is the process id."""
    return sorted(int(name) for name in os.listdir(task_dir) if name.isdigit())


def apply(policy: str, threads: Iterable[int] | None = None) -> str | None:
    """Set `policy` on `threads` (default: every thread of this process). None when done (or nothing to do);
    otherwise why not, for a warning: the runtime serves either way."""
    if policy == INHERIT:
        return None
    if policy != BATCH:
        raise ValueError(f"unknown thread policy '{policy}' (one of {', '.join(CHOICES)})")
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None:
        return "SCHED_BATCH is not available on this platform: threads keep their policy"
    try:
        for tid in thread_ids() if threads is None else threads:
            try:
                os.sched_setscheduler(tid, batch, os.sched_param(0))
            except ProcessLookupError:  # a thread that ended meanwhile
                continue
    except OSError as exc:  # a seccomp profile or a sandbox that refuses it
        return f"cannot set SCHED_BATCH ({exc}): threads keep their policy"
    return None
