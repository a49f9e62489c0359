"""`handoff.Deferred`: work other threads queue for the event loop without waking it, run in the order it came by
whoever reads first on the loop, or by the loop's one timer within `within` seconds while it expects pieces; one
piece that raises is logged and the rest still run."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
import uvloop
from ensemble_runtime.backends.handoff import Deferred

WAIT = 60.0  # seconds: a loaded 2-core machine


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


def test_what_a_thread_queues_runs_on_the_loop_within_the_time_without_a_wake_up() -> None:
    """The loop expects a piece, a thread queues it: the loop's timer runs it, on the loop's thread."""

    async def scenario() -> tuple[list[str], float]:
        deferred, ran, done = Deferred(within=0.05), list[str](), asyncio.Event()
        loop = asyncio.get_running_loop()

        def piece(name: str) -> None:
            ran.append(name)
            ran.append(threading.current_thread().name)
            done.set()  # on the loop: asyncio.Event is not thread-safe

        deferred.expect(loop)
        started = time.monotonic()
        worker = threading.Thread(target=deferred.add, args=(piece, "worker"), name="worker")
        worker.start()
        worker.join()
        await asyncio.wait_for(done.wait(), WAIT)
        return ran, time.monotonic() - started

    ran, waited = asyncio.run(scenario())
    assert ran == ["worker", "MainThread"]
    assert waited >= 0.04, "run by the timer, not at once: no wake-up per piece"


def test_the_timer_waits_on_while_a_piece_is_still_expected() -> None:
    """Two pieces expected; the thread of the second queues it only after several of the timer's turns: it still
    runs, and with nothing more expected the timer stops."""

    async def scenario() -> tuple[list[int], bool]:
        deferred, ran, done = Deferred(within=0.01), list[int](), asyncio.Event()
        loop = asyncio.get_running_loop()

        def piece(i: int) -> None:
            ran.append(i)
            if len(ran) == 2:
                done.set()

        deferred.expect(loop)
        deferred.expect(loop)
        deferred.add(piece, 1)
        late = threading.Timer(0.1, deferred.add, args=(piece, 2))
        late.start()
        await asyncio.wait_for(done.wait(), WAIT)
        late.join()
        await asyncio.sleep(0.05)  # the timer's turn after the last piece, if it were still armed
        return ran, deferred._timer is None

    ran, stopped = asyncio.run(scenario())
    assert ran == [1, 2]
    assert stopped, "nothing expected any more: no timer left armed"


def test_a_read_on_the_loop_runs_what_came_before_the_timer() -> None:
    async def scenario() -> list[int]:
        deferred, ran = Deferred(within=WAIT), list[int]()
        deferred.expect(asyncio.get_running_loop())
        worker = threading.Thread(target=deferred.add, args=(ran.append, 7))
        worker.start()
        worker.join()
        deferred.run()  # what `DataPlane.settle_answered` does before a read
        return ran

    assert asyncio.run(scenario()) == [7]


def test_the_timer_backs_off_while_it_finds_nothing() -> None:
    """One piece expected that does not come for 0.4 s (a model running long): the timer's turns grow apart up to
    `at_most` (about 12 turns in 0.4 s with 10 ms doubling to 40 ms), instead of one every 10 ms (40); the piece
    still runs once it comes. (A loaded machine only makes the turns fewer.)"""

    class Counted(Deferred):
        turns = 0

        def run(self) -> bool:
            Counted.turns += 1
            return super().run()

    async def scenario() -> list[int]:
        deferred, ran, done = Counted(within=0.01, at_most=0.04), list[int](), asyncio.Event()
        deferred.expect(asyncio.get_running_loop())
        await asyncio.sleep(0.4)

        def piece() -> None:
            ran.append(1)
            done.set()

        deferred.add(piece)
        await asyncio.wait_for(done.wait(), WAIT)
        return ran

    assert asyncio.run(scenario()) == [1]
    assert 1 <= Counted.turns <= 20, Counted.turns


def test_pieces_riding_ahead_of_an_expected_one_run_first_and_are_not_counted_as_expected() -> None:
    """A thread queues two riders and then the one expected piece (a chain's steps, then its request's end): they
    run in that order. The riders do not count against what the loop expects: a piece expected next, which comes
    only after several of the timer's turns, still runs by the timer (were the riders counted, the timer would
    think nothing more was expected and stop)."""

    async def scenario() -> list[str]:
        deferred, ran, done = Deferred(within=0.01), list[str](), asyncio.Event()
        loop = asyncio.get_running_loop()

        def piece(name: str, last: bool = False) -> None:
            ran.append(name)
            if last:
                done.set()

        def carried() -> None:
            deferred.ride(piece, "step 0")
            deferred.ride(piece, "step 1")
            deferred.add(piece, "end", True)

        deferred.expect(loop)
        worker = threading.Thread(target=carried)
        worker.start()
        worker.join()
        await asyncio.wait_for(done.wait(), WAIT)
        done.clear()
        deferred.expect(loop)
        late = threading.Timer(0.1, deferred.add, args=(piece, "next", True))
        late.start()
        await asyncio.wait_for(done.wait(), WAIT)
        late.join()
        return ran

    assert asyncio.run(scenario()) == ["step 0", "step 1", "end", "next"]


def test_run_soon_wakes_the_loop_for_what_a_thread_queued_and_is_harmless_once_it_closed() -> None:
    """A thread queues a piece and asks for it to run now (`run_soon`): the loop runs it, on its own thread, long
    before its timer (an hour here) would. Asked once the loop is closed, it does nothing (nobody waits any more)."""

    async def scenario() -> tuple[list[str], Deferred, asyncio.AbstractEventLoop]:
        deferred, ran, done = Deferred(within=3600.0, at_most=3600.0), list[str](), asyncio.Event()
        loop = asyncio.get_running_loop()

        def piece() -> None:
            ran.append(threading.current_thread().name)
            done.set()

        def on_worker() -> None:
            deferred.add(piece)
            deferred.run_soon()

        deferred.expect(loop)
        worker = threading.Thread(target=on_worker, name="worker")
        worker.start()
        worker.join()
        await asyncio.wait_for(done.wait(), WAIT)
        return ran, deferred, loop

    ran, deferred, loop = asyncio.run(scenario())
    assert ran == ["MainThread"]
    assert loop.is_closed()
    deferred.add(ran.append, "late")
    deferred.run_soon()  # no error
    assert ran == ["MainThread"]


@pytest.mark.parametrize("loops", ["asyncio", "uvloop"])
def test_a_ring_before_the_first_piece_is_expected_is_heard_once_the_loop_watches(loops: str) -> None:
    """A thread may answer, queue its piece and ring before the loop said it expects it (the loop hands a request
    on, then expects its end): the loop, watching from its first `expect`, still runs the piece at once (the timer
    is an hour). Rung again and again, each ring is heard; the next loop it is expected on watches too."""
    deferred = Deferred(within=3600.0, at_most=3600.0)

    async def scenario() -> list[str]:
        ran = list[str]()
        loop = asyncio.get_running_loop()
        for round_ in range(3):
            done = asyncio.Event()

            def piece(name: str, done: asyncio.Event = done) -> None:
                ran.append(name)
                done.set()

            def on_worker(name: str) -> None:
                deferred.add(piece, name)
                deferred.run_soon()

            worker = threading.Thread(target=on_worker, args=(f"piece {round_}",))
            worker.start()
            worker.join()  # rung before it is expected
            deferred.expect(loop)
            await asyncio.wait_for(done.wait(), WAIT)
        return ran

    runner = uvloop.run if loops == "uvloop" else asyncio.run
    assert runner(scenario()) == ["piece 0", "piece 1", "piece 2"]
    assert runner(scenario()) == ["piece 0", "piece 1", "piece 2"]  # the same Deferred, on a new loop
