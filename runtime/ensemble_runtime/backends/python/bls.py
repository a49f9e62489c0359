"""How `InferenceRequest.exec()` reaches the server (and `MetricFamily` its version's metric scope): a context
variable the backend sets around each call.

No module-level state holds the caller: the backend sets `BLS_TARGET` in the context it runs a model's
`initialize`/`execute`/`finalize` in (for synchronous models, the context each instance's thread runs all its
calls in, set once), so a BLS call always goes to the server that owns the calling model.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ensemble_runtime.backends.base import ModelCaller, ModelStreamCaller
from ensemble_runtime.backends.python.metric_scope import MetricScope

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BlsTarget:
    """The in-process data plane a model's BLS requests go to, the event loop it runs on, and the version's
    leases on the server's custom metrics (None: the server keeps none)."""

    caller: ModelCaller
    loop: asyncio.AbstractEventLoop
    model_name: str
    stream_caller: ModelStreamCaller | None = None
    metrics: MetricScope | None = None


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


def _refuse_on_loop(target: BlsTarget) -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        raise BlsUnavailableError(
            f"model '{target.model_name}': InferenceRequest.exec() was called on the event loop thread "
            "(from an `async def execute`), where waiting would deadlock; use `await request.async_exec()`"
        )


def run_sync(target: BlsTarget, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the server's loop from a worker thread and wait for it."""
    try:
        _refuse_on_loop(target)
    except BlsUnavailableError:
        coroutine.close()
        raise
    return asyncio.run_coroutine_threadsafe(coroutine, target.loop).result()


def iterate_sync(target: BlsTarget, items: AsyncIterator[T]) -> Iterator[T]:
    """A generator over `items` for a worker thread: each item is awaited on the server's loop as the model
    asks for it. Leaving the loop early (or dropping the generator) closes `items` on the server's loop."""
    _refuse_on_loop(target)

    async def step() -> tuple[bool, T | None]:
        try:
            return True, await anext(items)
        except StopAsyncIteration:
            return False, None

    async def close() -> None:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()

    def generate() -> Iterator[T]:
        try:
            while True:
                more, item = asyncio.run_coroutine_threadsafe(step(), target.loop).result()
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to release
                asyncio.run_coroutine_threadsafe(close(), target.loop)

    return generate()
