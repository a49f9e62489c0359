"""Handing a result computed on a worker thread back to the event loop: to a future (no future chaining), to a
callback (`on_loop`), or to work the loop may run later (`Deferred`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
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
    """Work for the loop that other threads queue and then wake it for (`add`, then `wake`), so that what matters
    more can come between (an answer leaving); the loop also runs it before it reads what the work changes (`run`),
    so nothing read on the loop after `add` returned misses it."""

    def __init__(self) -> None:
        self._queue: collections.deque[Callable[[], None]] = collections.deque()  # append/popleft: thread-safe

    def add(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue `fn(*args)` (any thread)."""
        self._queue.append(functools.partial(fn, *args))

    def wake(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have `loop` run what is queued (from another thread; nothing once the loop is closed)."""
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self.run)

    def run(self) -> None:
        """On the loop: everything queued, in the order it came; one that raises is logged, the rest still run."""
        while self._queue:
            fn = self._queue.popleft()  # only the loop takes: what is there stays there
            try:
                fn()
            except Exception:
                log.exception("deferred work failed on the loop")
