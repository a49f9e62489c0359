"""Work on request bodies that may be large runs in a worker thread, so the event loop keeps answering probes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ensemble_runtime.inference import InferResponse

P = ParamSpec("P")
T = TypeVar("T")

INLINE_BYTES = 64 * 1024  # below this, decoding inline costs less than the hop to a thread


async def sized(size: int, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args)` inline when the payload it works on is small, else in the default executor's threads."""
    if size <= INLINE_BYTES:
        return call(*args, **kwargs)
    return await asyncio.to_thread(call, *args, **kwargs)


def response_size(response: InferResponse) -> int:
    """The bytes of a response's outputs: what encoding it works on."""
    return sum(int(array.nbytes) for array in response.outputs.values())
