"""The requests of one ModelStreamInfer call in flight (`StreamSession.drive`): at most its limit, on the task path
and the direct one (`stream_direct`) together."""

from __future__ import annotations

import asyncio
import threading

from ensemble_runtime.backends.handoff import on_loop


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Gate:
    """The requests of one stream in flight: at most `limit` (the session reads no further meanwhile), entered on
    the loop, left from any thread; and whether the client went away (`give_up`)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self._free = max(1, limit)
        self._taken = 0
        self._gone = False
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None  # the session's, while it waits
        self._loop = loop
        self._loop_thread = threading.get_ident()

    @property
    def gone(self) -> bool:
        return self._gone

    async def enter(self) -> bool:
        """On the loop: a place for one more request, once there is one; False when the client went away."""
        while True:
            with self._lock:
                if self._gone:
                    return False
                if self._taken < self._free:
                    self._taken += 1
                    return True
                waiter = self._waiter = self._loop.create_future()
            await waiter

    async def settled(self) -> None:
        """On the loop: returns once no request is in flight, or the client went away."""
        while True:
            with self._lock:
                if self._gone or not self._taken:
                    return
                waiter = self._waiter = self._loop.create_future()
            await waiter

    def leave(self) -> None:
        """Any thread: a request ended."""
        with self._lock:
            self._taken -= 1
            waiter, self._waiter = self._waiter, None
        self._wake(waiter)

    def give_up(self) -> None:
        """Any thread: the client went away; nothing more is read or sent."""
        with self._lock:
            self._gone = True
            waiter, self._waiter = self._waiter, None
        self._wake(waiter)

    def _wake(self, waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None:
            on_loop(self._loop, self._loop_thread, _resolve, waiter)
