"""A native core the event loop's thread drives (`--grpc-native-threads 0`, `--http-native-threads 0`).

Such a core has no thread of its own: its runtime runs only when the loop turns it (`core.turn()`), which it does
when the runtime's I/O driver has something ready (`add_reader` on `core.driver_fd()`), and on a tick for the
runtime's timers (handshake, keepalive, send and body deadlines, a call's grpc-timeout), which no descriptor
announces: every 10 ms after a tick that found work, backing off to 50 ms while ticks find none (so a timer of an
idle port fires at most that late; its deadlines are seconds). Within a turn, whenever the core's tasks have
queued calls, the core calls `take` (the front end's drain) with the GIL: what the data plane answers there at
once (a fast model, an error) is written in the same turn, with no wake-up of any thread; an answer given on
another thread (a python model's) is written by that thread while the loop is not turning the core. A turn runs for at most
2 ms; one that ran out of it is followed by another as soon as the loop's other ready callbacks have run, so a
burst of work in the core never holds the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from ensemble_runtime.protocol._native import ON_LOOP as ON_LOOP  # whether this build's cores can run on the loop

log = logging.getLogger(__name__)
TICK_SECS = 0.01  # the tick for the core's timers, after a tick that found work
IDLE_TICK_SECS = 0.05  # at most this while ticks find none


def native_threads(configured: int | None, usable_cpus: int, on_loop: bool = True) -> int:
    """A native core's threads: as configured, else none (the event loop's thread drives the core) where the
    runtime has one CPU to run on, so that no request is handed between threads that take turns on it; else one,
    which decodes and encodes beside the loop. `on_loop`: whether this build of the core can run with none (else
    the default is one thread, and an explicit 0 is refused by the core with its reason)."""
    if configured is not None:
        return configured
    return 0 if usable_cpus <= 1 and on_loop else 1


class DrivenCore(Protocol):
    def driver_fd(self) -> int | None: ...
    def turn(self, take: Callable[[], object] | None = None) -> tuple[int, bool]: ...
    def begin_stop(self) -> None: ...
    @property
    def finished(self) -> bool: ...
    def stop(self, grace: float) -> None: ...


class LoopDriver:
    """Turns `core` on `loop`; `take` takes the calls its tasks queued (None: a core that queues none)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, core: DrivenCore, fd: int,
                 take: Callable[[], object] | None) -> None:
        self._loop = loop
        self._core = core
        self._fd = fd
        self._take = take
        self._again: asyncio.Handle | None = None  # the next turn, after one that ran out of its budget
        self._tick_secs = TICK_SECS
        loop.add_reader(fd, self.turn)
        self._tick: asyncio.TimerHandle | None = loop.call_later(TICK_SECS, self._on_tick)

    def turn(self) -> int:
        """One turn; the tasks the core polled."""
        polls, quiet = self._core.turn(self._take)
        if not quiet and self._again is None:
            self._again = self._loop.call_soon(self._turn_again)
        return polls

    def _turn_again(self) -> None:
        self._again = None
        self.turn()

    def _on_tick(self) -> None:
        found = self.turn()
        self._tick_secs = TICK_SECS if found else min(self._tick_secs * 2, IDLE_TICK_SECS)
        self._tick = self._loop.call_later(self._tick_secs, self._on_tick)

    async def stop(self, grace: float) -> None:
        """Stop taking connections; turn the core while the calls in flight finish, for up to `grace` seconds."""
        self._core.begin_stop()
        deadline = self._loop.time() + max(grace, 0.0)
        while not self._core.finished and self._loop.time() < deadline:
            await asyncio.sleep(TICK_SECS)
        self._loop.remove_reader(self._fd)
        for handle in (self._tick, self._again):
            if handle is not None:
                handle.cancel()
        self._tick = self._again = None
        self._core.stop(0.0)  # nothing left to wait for: ends the runtime and what it still holds


def drive(loop: asyncio.AbstractEventLoop, core: DrivenCore, take: Callable[[], object] | None) -> LoopDriver | None:
    """A driver for `core` if the loop is to drive it (it was made with no threads), else None."""
    fd = core.driver_fd()
    if fd is None:
        return None
    log.info("%s: no threads of its own, the event loop's thread drives it", type(core).__name__)
    return LoopDriver(loop, core, fd, take)
