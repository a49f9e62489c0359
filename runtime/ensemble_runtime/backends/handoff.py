"""Handing a result computed on a worker thread back to a future on the event loop (no future chaining)."""

from __future__ import annotations

import asyncio
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
