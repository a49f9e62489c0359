"""The threads of a python model version: a call for the version goes to the first idle instance thread or waits
for one; a call for one instance runs on its thread; a thread that left takes nothing more (real threads and a
real event loop; plain objects stand in for the models)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
import weakref
from typing import Any

import pytest
from ensemble_runtime.backends.base import RunTimes
from ensemble_runtime.backends.python.threads import CallQueue, InstanceThread


class Model:
    """Records which thread ran each call; `hold` blocks until the event is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ran: list[str] = []

    def hold(self, event: threading.Event, tag: str) -> str:
        assert event.wait(60), "never released"
        self.ran.append(tag)
        return f"{self.name}:{tag}:{threading.current_thread().name}"

    def fail(self) -> None:
        raise SystemExit(3)

    def look(self, seen: dict[str, bool], tag: str) -> bool:
        """Whether the caller had handed out all its calls (`seen["out"]`) when this one ran."""
        self.ran.append(tag)
        return seen["out"]


def submit(where: CallQueue | InstanceThread, method: str, *args: Any, ran: RunTimes | None = None) -> Any:
    """`method(*args)` through `where`, as the instance does; the future."""
    return where.submit(asyncio.get_running_loop(), method, args, ran)


def test_a_call_for_the_version_takes_the_first_free_thread_or_waits_for_one() -> None:
    async def main() -> None:
        calls = CallQueue(2)
        models = [Model("a"), Model("b")]
        threads = [InstanceThread(f"t-{m.name}", m, calls) for m in models]
        first, second, later = threading.Event(), threading.Event(), threading.Event()
        ran = RunTimes()
        held = [submit(calls, "hold", first, "1"), submit(calls, "hold", second, "2")]
        waiting = submit(calls, "hold", later, "3", ran=ran)
        later.set()  # free to run, but both threads are busy: it waits in the queue
        await asyncio.sleep(0.05)
        assert not waiting.done() and ran.started_ns == 0 and ran.queued_ns > 0
        second.set()  # the thread that ran "2" frees up and takes "3" next
        done = [await held[1], await waiting]
        assert done[0].split(":")[0] == done[1].split(":")[0]  # the same instance ran both
        assert done[1].endswith(f"t-{done[1][0]}") and ran.ended_ns >= ran.started_ns > 0
        first.set()
        assert (await held[0]).split(":")[0] != done[0].split(":")[0]  # the other instance
        for thread in threads:
            thread.shutdown()

    asyncio.run(main())


def test_a_call_for_one_instance_runs_on_its_thread_and_errors_come_back() -> None:
    """Also what a version of one instance does with a call for the version: its thread's queue is the version's."""

    async def main() -> None:
        calls = CallQueue(1)
        model = Model("a")
        thread = InstanceThread("t-a", model, calls)
        event = threading.Event()
        event.set()
        assert await submit(thread, "hold", event, "x") == "a:x:t-a"
        assert await submit(calls, "hold", event, "y") == "a:y:t-a"  # the only one
        with pytest.raises(SystemExit) as exited:  # handed to the caller, as run_in_executor does
            await submit(thread, "fail")
        assert exited.value.code == 3
        thread.shutdown()

    asyncio.run(main())


TAG: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="")


class Tagger:
    """Reads and sets `TAG` in the context it is called in."""

    def swap(self, value: str) -> str:
        before = TAG.get()
        TAG.set(value)
        return before


def test_every_call_runs_in_the_context_its_thread_was_given() -> None:
    """Each thread runs every call, by future or by `then`, in the one context it was given: what a call set there
    the next call on that thread reads; another thread, and the loop, never see it."""

    async def main() -> None:
        calls = CallQueue(1)
        given = contextvars.copy_context()
        given.run(TAG.set, "given")
        thread = InstanceThread("t-tagged", Tagger(), calls, given)
        other = InstanceThread("t-other", Tagger(), CallQueue(1))  # a copy of the caller's context
        TAG.set("loop")
        assert await submit(thread, "swap", "first") == "given"
        assert await submit(calls, "swap", "second") == "first"
        done: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def then(ok: bool, value: Any) -> None:
            loop.call_soon_threadsafe(done.set_result, (ok, value))

        calls.submit_then(then, "swap", ("third",))
        assert await done == (True, "second")
        assert await submit(other, "swap", "elsewhere") == ""  # copied before the loop set its own
        assert TAG.get() == "loop" and given[TAG] == "third"
        thread.shutdown()
        other.shutdown()

    asyncio.run(main())


def test_a_thread_that_left_takes_no_more_calls() -> None:
    async def main() -> None:
        calls = CallQueue(2)
        gone, staying = Model("gone"), Model("staying")
        leaving = InstanceThread("t-gone", gone, calls)
        InstanceThread("t-staying", staying, calls)
        leaving.shutdown()
        event = threading.Event()
        event.set()
        results = await asyncio.gather(*(submit(calls, "hold", event, str(i)) for i in range(4)))
        assert all(r.startswith("staying:") for r in results) and gone.ran == []

    asyncio.run(main())


def test_calls_put_in_one_turn_of_the_loop_start_once_it_is_over() -> None:
    """A batch handed out in one callback of the loop starts as one: no call starts while the loop is still handing
    out (here it blocks for 50 ms after the puts, its GIL released, and no call runs in that time)."""

    async def main() -> None:
        model = Model("a")
        thread = InstanceThread("t-a", model, CallQueue(1))
        seen = {"out": False}
        futures = [submit(thread, "look", seen, str(i)) for i in range(3)]
        time.sleep(0.05)  # still in the loop's callback: the thread must not have been rung
        seen["out"] = True
        assert await asyncio.gather(*futures) == [True, True, True]
        assert model.ran == ["0", "1", "2"]
        thread.shutdown()

    asyncio.run(main())


def test_a_call_put_off_the_loop_starts_at_once_and_the_end_rings_even_when_the_loop_stopped_first() -> None:
    """Off the loop (a chain's next step, put by the thread of the step before) nothing waits for a loop. A call put
    on a loop that stops before its ring runs still runs, and the thread still ends, once it is shut down."""
    model = Model("a")
    thread = InstanceThread("t-a", model, CallQueue(1))
    outcomes: list[tuple[bool, Any]] = []
    ended = threading.Event()

    def then(ok: bool, value: Any) -> None:
        outcomes.append((ok, value))
        ended.set()

    seen = {"out": True}
    thread.put((None, then, "look", (seen, "off"), None, False))  # no loop running
    assert ended.wait(60) and outcomes == [(True, True)]

    loop = asyncio.new_event_loop()
    try:
        ended.clear()

        def hand_out_and_stop() -> None:
            thread.put((None, then, "look", (seen, "late"), None, False))
            loop.stop()  # before the ring the put left for the loop's next turn

        loop.call_soon(hand_out_and_stop)
        loop.run_forever()
    finally:
        loop.close()
    thread.shutdown()  # rings at once, whatever was left: the late call runs, then the thread ends
    assert ended.wait(60) and model.ran == ["off", "late"]
    thread._thread.join(60)
    assert not thread._thread.is_alive()


def test_ended_waits_for_the_thread_to_let_its_model_go_and_gives_up_on_a_busy_one() -> None:
    async def main() -> None:
        calls = CallQueue(1)
        model = Model("a")
        thread = InstanceThread("t-ended", model, calls)
        held = weakref.ref(model)
        del model
        thread.shutdown()
        assert await thread.ended(30)
        del thread, calls  # they refer to each other: a cycle, as an unloaded version leaves them
        gc.collect()
        assert held() is None  # the thread's frame had let go of it too

        busy_model = Model("b")
        busy = InstanceThread("t-busy", busy_model, CallQueue(1))
        release = threading.Event()
        call = submit(busy, "hold", release, "x")
        busy.shutdown()  # the call already there still runs, then the thread ends
        assert not await busy.ended(0.05)
        release.set()
        assert await call == "b:x:t-busy"
        assert await busy.ended(30)

    asyncio.run(main())
