"""Handing a result computed on a worker thread back to the event loop: to a future (no future chaining), or to a
callback (`on_loop`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


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
