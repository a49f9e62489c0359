"""A request handed to `DataPlane.infer_then` and answered while the event loop's thread is blocked: what shows that
a request's way from the hand-over to its answer needs no turn of the loop (tests/integration/runtime)."""

from __future__ import annotations

import asyncio
import threading

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.inference import InferRequest, InferResponse


async def answered_while_blocked(
    dataplane: DataPlane, request: InferRequest, wait: float
) -> tuple[InferResponse | Exception, str]:
    """Hand `request` over, let the loop end the turn that did (a call the loop puts for a model's thread rings it
    once that turn's callback is over: backends/python/threads.py), then wait up to `wait` seconds for the answer
    on this thread, the loop's (blocked: nothing posted to the loop after the hand-over runs meanwhile). The answer
    and the name of the thread that gave it."""
    answered = threading.Event()
    outcome: list[tuple[InferResponse | Exception, str]] = []

    def answer(result: InferResponse | Exception) -> None:
        outcome.append((result, threading.current_thread().name))
        answered.set()

    assert dataplane.infer_then(request, None, answer)
    await asyncio.sleep(0)  # the model's thread is rung (before this coroutine goes on)
    assert answered.wait(wait), "not answered while the loop was blocked: the request needed the loop on its way"
    return outcome[0]
