"""Handing a result computed on a worker thread back to the event loop: to a future (no future chaining), to a
callback (`on_loop`), or to work the loop may run later (`Deferred`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def deliver(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Run on the loop (via `call_soon_threadsafe`): settle `future` with `value`, a result if `ok`, else an
    exception; nothing if the caller was cancelled meanwhile."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def on_loop(loop: asyncio.AbstractEventLoop, loop_thread: int, fn: Callable[..., None], *args: Any) -> None:
    """Call `fn(*args)` on the loop: at once when this is the loop's thread (`loop_thread`, its
    `threading.get_ident()`: the work ran inline), else posted with `call_soon_threadsafe` (nothing, once the loop
    is closed: nobody waits any more)."""
    if threading.get_ident() == loop_thread:
        fn(*args)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


class Deferred:
    """Work for the loop that other threads queue (`add`) without waking it: the loop runs it before it reads
    what the work changes (`run`), and otherwise on one timer while it waits for pieces it was told of (`expect`):
    within `within` seconds of being queued while pieces keep coming, the timer backing off to `at_most` while it
    finds none (a model running long, or stuck: a few turns a second, not hundreds). A thread's wake-up of the
    loop costs a switch to the loop's thread and one turn of it per piece; under traffic the loop runs what came
    as it takes the next request, and the timer rarely finds anything. With nothing else in flight the thread
    wakes the loop itself (`run_soon`): the loop is idle then, and the next request need not carry the work.

    That wake-up rings an eventfd of its own (`_bell`), which the loop the pieces are expected on watches, rather
    than `call_soon_threadsafe`: `os.eventfd_write` releases the GIL around the write, so the woken loop takes the
    GIL and runs at once, where a wake-up with the GIL held let the loop preempt the thread only to wait for its GIL
    (measured at one request in flight: about three switches a request more, bench/README.md)."""

    def __init__(self, within: float = 0.005, at_most: float = 0.1) -> None:
        # (work, whether expected); append/popleft: thread-safe
        self._queue: collections.deque[tuple[Callable[[], None], bool]] = collections.deque()
        self._within = within
        self._at_most = at_most
        self._delay = within  # the timer's next wait
        self._expected = 0  # pieces the loop was told of (`expect`) and has not run yet
        self._timer: asyncio.TimerHandle | None = None
        self._bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # `run_soon`'s; closed with this object
        weakref.finalize(self, os.close, self._bell)
        self._heard_on: asyncio.AbstractEventLoop | None = None  # the loop that watches the bell

    def add(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue `fn(*args)` (any thread): a piece the loop `expect`s."""
        self._queue.append((functools.partial(fn, *args), True))

    def ride(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue `fn(*args)` (any thread) ahead of an expected piece still to come: it runs with the pieces before
        that one, no later (a step's end, ahead of its ensemble request's)."""
        self._queue.append((functools.partial(fn, *args), False))

    def run_soon(self) -> None:
        """From another thread, after its `add`: wake the loop the pieces are expected on to run what is queued now
        (nothing, once that loop is closed: nobody waits any more). For a piece whose request was the only one in
        flight: the loop is idle then, and the wake-up falls while the client reads its answer, where otherwise the
        piece would wait for the next request and be run on its time. Rung before any piece was expected, the loop
        hears it once it watches (`expect`)."""
        os.eventfd_write(self._bell, 1)  # (the GIL released around it: see the class)

    def expect(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: another thread will `add` one piece (it may have already)."""
        self._expected += 1
        if self._heard_on is not loop:  # the first piece expected on this loop: it watches the bell from now on
            loop.add_reader(self._bell, self._rung)
            self._heard_on = loop
        if self._timer is None:
            self._timer = loop.call_later(self._delay, self._due, loop)

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self.run():
            self._delay = min(self._delay * 2, self._at_most)
        if self._expected > 0:  # some still running on their threads
            self._timer = loop.call_later(self._delay, self._due, loop)

    def _rung(self) -> None:
        """On the loop: the bell was rung (`run_soon`), once or more since it was last heard."""
        with contextlib.suppress(BlockingIOError):  # (heard already)
            os.eventfd_read(self._bell)
        self.run()

    def run(self) -> bool:
        """On the loop: everything queued, in the order it came; one that raises is logged, the rest still run.
        Whether there was any."""
        if not self._queue:
            return False
        while self._queue:
            fn, expected = self._queue.popleft()  # only the loop takes: what is there stays there
            self._expected -= expected
            try:
                fn()
            except Exception:
                log.exception("deferred work failed on the loop")
        self._delay = self._within  # pieces are coming: the timer's wait is short again
        return True
