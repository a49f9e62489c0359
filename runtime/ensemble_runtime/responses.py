"""Decoupled responses: zero or many per request, sent from any thread, read in order on the event loop.

A decoupled model (Triton's `model_transaction_policy { decoupled: true }`) answers a request through a
channel instead of a return value: each `StreamItem` carries outputs or an error, and the last one carries the
final flag (with or without a response, as Triton's `TRITONSERVER_RESPONSE_COMPLETE_FINAL`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ensemble_runtime.errors import InferenceError
from ensemble_runtime.inference import InferResponse, Tensor


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One thing a decoupled model sent: outputs, an error, or neither (the final flag alone)."""

    outputs: dict[str, Tensor] | None = None
    error: InferenceError | None = None
    final: bool = False


@dataclass(frozen=True, slots=True)
class StreamResponse:
    """One response of a streamed request as the data plane hands it to a transport: a response, an error or
    neither (the final flag alone, which a transport sends only when the client asked for empty finals)."""

    response: InferResponse | None = None
    error: InferenceError | None = None
    final: bool = False


class ResponseChannel:
    """The responses of one decoupled request. `put` is safe from any thread; reading happens on `loop`.

    `cancel()` (the reader went away) makes later `put`s no-ops and `cancelled` true, which a model sees
    through `is_cancelled()`; nothing is queued for a reader that will never come back.

    With a `listener`, nothing is read on the loop: `put` hands each item to it at once, on the thread that put it
    (the sender's lock keeps one request's items in order), up to the final one.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, listener: Callable[[StreamItem], None] | None = None
    ) -> None:
        self._loop = loop
        self._listener = listener
        self._items: deque[StreamItem] = deque()
        self._arrived: asyncio.Event = asyncio.Event()
        self._cancelled = False
        self._finished = False  # set by put, in the sender's thread
        self._final_arrived = False  # set on the loop, when the final item is queued for reading
        # the model call answering through this channel, held here so that it runs on (referenced) to its end
        # when its reader has gone away (stream_inference.model_items)
        self.call: asyncio.Future[Any] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def finished(self) -> bool:
        """The final flag has been put."""
        return self._finished

    @property
    def drained(self) -> bool:
        """Nothing more will come but the final flag alone: the model has sent it, and no response or error
        waits to be read before it. (Read on the loop.)"""
        return self._final_arrived and all(item.outputs is None and item.error is None for item in self._items)

    def put(self, item: StreamItem) -> None:
        if self._cancelled or self._finished:
            return
        if item.final:
            self._finished = True
        if self._listener is not None:
            self._listener(item)
            return
        if self._on_loop_thread():
            self._append(item)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads any more
            self._loop.call_soon_threadsafe(self._append, item)

    def cancel(self) -> None:
        self._cancelled = True

    async def items(self) -> AsyncIterator[StreamItem]:
        """The items in the order they were put, up to and including the final one."""
        while True:
            while not self._items:
                self._arrived.clear()
                await self._arrived.wait()
            item = self._items.popleft()
            yield item
            if item.final:
                return

    def _append(self, item: StreamItem) -> None:
        self._items.append(item)
        self._final_arrived = self._final_arrived or item.final
        self._arrived.set()

    def _on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:  # no loop runs in this thread: a model's own thread
            return False
