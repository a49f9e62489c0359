"""How `InferenceRequest.exec()` reaches the server: a context variable the backend sets around each call.

No module-level state holds the caller: the backend sets `BLS_TARGET` in the context it runs a model's
`initialize`/`execute`/`finalize` in (copied into the instance's thread for synchronous models), so a BLS
call always goes to the server that owns the calling model.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from ensemble_runtime.backends.base import ModelCaller

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BlsTarget:
    """The in-process data plane a model's BLS requests go to, and the event loop it runs on."""

    caller: ModelCaller
    loop: asyncio.AbstractEventLoop
    model_name: str


BLS_TARGET: contextvars.ContextVar[BlsTarget | None] = contextvars.ContextVar("bls_target", default=None)


class BlsUnavailableError(RuntimeError):
    """BLS used outside a model call, or synchronously from the event loop thread."""


def current_target() -> BlsTarget:
    target = BLS_TARGET.get()
    if target is None:
        raise BlsUnavailableError(
            "InferenceRequest.exec()/async_exec() can only be called while the runtime is running this "
            "model's initialize, execute or finalize"
        )
    return target


def run_sync(target: BlsTarget, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the server's loop from a worker thread and wait for it."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        coroutine.close()
        raise BlsUnavailableError(
            f"model '{target.model_name}': InferenceRequest.exec() was called on the event loop thread "
            "(from an `async def execute`), where waiting would deadlock; use `await request.async_exec()`"
        )
    return asyncio.run_coroutine_threadsafe(coroutine, target.loop).result()
