"""How the runtime uses Python's cyclic garbage collector (`--python-gc`).

Reference counting frees almost everything a request allocates; the cyclic collector is for the rest. Under
Python's own settings it still runs all the time on a busy server. Its youngest generation is collected every
700 net allocations of container objects, and at concurrency 16 a 2-step ensemble's requests in flight hold more
than that between them. So the collector keeps running although it finds nothing. It then promotes what is in
flight to the older generations, and every so often it walks the whole heap: the models, onnxruntime, numpy,
grpc and the rest, about 90,000 objects here. Measured with perf_analyzer (`chain2`, gRPC, concurrency 16, one
core), one run of the default server made about 8,800 young collections and 29 full ones. Each full collection
took 27 ms, with every request in flight waiting on it.

"tuned" (the default) does two things:
- **What is loaded is frozen** (`gc.freeze`): once the initial load is done, and again whenever the versions
  loaded change. A full collection then walks only what came after, a few hundred objects instead of the heap
  (84 us instead of 27 ms). Each time, the frozen objects are thawed and collected first. So what an unloaded
  version leaves in cycles (a model instance that refers to itself, with its arrays or its GPU session) is
  freed at once, instead of whenever the collector next walks the whole heap (never, on an idle server).
- **The youngest generation is collected every 2,000 net allocations**, not 700. That is the threshold CPython's
  free-threaded collector starts with. The requests in flight no longer trip it: the same run made no
  collections at all, and served 9-12% more requests per second on 8-10% less CPU (gRPC and HTTP). What this lets linger is the
  cyclic garbage of about 1,300 more container objects. The serving path makes none: 4,000 refused requests of
  1 MiB each made no collections either.

A settle (thaw, collect, freeze) takes the GIL for one full collection of the heap: 15-25 ms here, more for models
whose Python objects number in the millions. It runs on the loop after the initial load and then only when the
versions loaded change, coalesced to one per turn of the loop. The default collector made such pauses every few
seconds under load. An unloaded python model's instance threads have ended by then (PythonInstance.close waits
for them), so what they held is garbage when the settle looks. Each let go of its model as it ended: the runtime's
own objects hold no model in a cycle, and one in no cycle of its own is freed at once under either setting.

"stock" leaves Python's collector exactly as Python sets it (700, 10, 10; nothing frozen), for comparison.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

TUNED = "tuned"
STOCK = "stock"
CHOICES = (TUNED, STOCK)
YOUNG_THRESHOLD = 2000  # net allocations of container objects between collections of the youngest generation


@dataclass(frozen=True)
class GcReading:
    """What the collector has done in this process: collections per generation (since the process started),
    objects frozen now, and this runtime's settles (how many, how long in all)."""

    collections: tuple[int, ...]
    frozen: int
    settles: int
    settle_seconds: float


@dataclass
class PythonGc:
    """Applies `--python-gc` to this process's collector: `settle` (or `settle_soon`, coalesced) on the loop
    whenever the objects loaded change."""

    policy: str = TUNED
    young_threshold: int = YOUNG_THRESHOLD
    settles: int = 0
    settle_seconds: float = 0.0
    _pending: asyncio.Handle | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.policy not in CHOICES:
            raise ValueError(f"unknown python gc policy '{self.policy}' (one of {', '.join(CHOICES)})")

    @property
    def tuned(self) -> bool:
        return self.policy == TUNED

    def settle(self) -> None:
        """Thaw what was frozen, collect the whole heap, freeze what is left (tuned; nothing when stock)."""
        if self._pending is not None:  # this one does what the pending one would
            self._pending.cancel()
            self._pending = None
        if not self.tuned:
            return
        start = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(self.young_threshold, older, oldest)
        took = time.perf_counter() - start
        self.settles += 1
        self.settle_seconds += took
        log.debug("python gc: %d objects frozen, %d collected, in %.1f ms", gc.get_freeze_count(), found,
                  took * 1000)

    def settle_soon(self) -> None:
        """On the loop: `settle` on its next turn, once however often this is called before then."""
        if self.tuned and self._pending is None:
            self._pending = asyncio.get_running_loop().call_soon(self.settle)

    def read(self) -> GcReading:
        return GcReading(collections=tuple(int(s["collections"]) for s in gc.get_stats()),
                         frozen=gc.get_freeze_count(), settles=self.settles, settle_seconds=self.settle_seconds)
