"""`handoff.Deferred`: work other threads queue for the event loop, run in the order it came, by the wake-up or by
whoever reads first on the loop; one piece that raises is logged and the rest still run."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from ensemble_runtime.backends.handoff import Deferred


def test_run_takes_everything_queued_in_order_and_survives_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    deferred, ran = Deferred(), list[int]()

    def fail() -> None:
        raise ValueError("broken")

    deferred.add(ran.append, 1)
    deferred.add(fail)
    deferred.add(ran.append, 2)
    with caplog.at_level(logging.ERROR):
        deferred.run()
    assert ran == [1, 2]
    assert "deferred work failed" in caplog.text and "broken" in caplog.text
    deferred.run()  # nothing left
    assert ran == [1, 2]


def test_a_thread_adds_then_wakes_the_loop() -> None:
    async def scenario() -> list[str]:
        deferred, ran, woken = Deferred(), list[str](), asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_thread() -> None:
            deferred.add(ran.append, threading.current_thread().name)
            deferred.add(woken.set)  # runs on the loop: asyncio.Event is not thread-safe
            deferred.wake(loop)

        worker = threading.Thread(target=on_thread, name="worker")
        worker.start()
        await asyncio.wait_for(woken.wait(), 60)
        worker.join()
        return ran

    assert asyncio.run(scenario()) == ["worker"]


def test_waking_a_closed_loop_is_nothing() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    Deferred().wake(loop)
