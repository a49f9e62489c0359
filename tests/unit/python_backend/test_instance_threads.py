"""The threads of a python model version: a call for the version goes to the first idle instance thread or waits
for one; a call for one instance runs on its thread; a thread that left takes nothing more (real threads and a
real event loop; plain objects stand in for the models)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
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


def submit(where: CallQueue | InstanceThread, method: str, *args: Any, ran: RunTimes | None = None) -> Any:
    """`method(*args)` through `where`, in a context of its own, as the instance does; the future."""
    return where.submit(asyncio.get_running_loop(), contextvars.copy_context(), method, args, ran)


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
