"""The threads a python model version runs on: one per instance, bound to that instance's model object.

A call for one instance (`initialize`, `finalize`, an execution the scheduler gave that instance) goes to its
thread. A call for the version (`CallQueue.submit`: any instance may run it) goes to the first idle thread, or
waits in the version's queue, which a thread drains as it frees up (Triton: a free instance takes the next
request); with a single instance its thread's own queue is the version's. Either way no call makes a round
trip through the event loop to start: each thread hands its results back with `call_soon_threadsafe` and goes
on to the next call. A call made with `submit_then` has no future: the thread that ran it calls its `then` with
the outcome, on that thread. Every call runs in the context its thread runs in (`InstanceThread`'s `context`), made
once when the thread starts: no context is copied or entered per call, and what a model's method sets in it stays
for its next call on that thread, as in a Triton stub's one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from ensemble_runtime.backends.base import RunTimes
from ensemble_runtime.backends.handoff import deliver

log = logging.getLogger(__name__)

# Where an outcome goes on the thread that ran the call: (True, what the method returned) or (False, what it
# raised, any BaseException).
Then = Callable[[bool, Any], None]
# loop and future (or None and the `then` to call instead), the name of the model's method to call (on
# the model of the thread that runs it), args, where to stamp when it ran, and whether it came from the version's
# queue (the thread was taken off the idle list for it). A plain tuple: it is made and unpacked once per call.
_Job = tuple[
    asyncio.AbstractEventLoop | None, "asyncio.Future[Any] | Then", str, tuple[Any, ...],
    RunTimes | None, bool,
]


class CallQueue:
    """One model version's queue of calls that any of its instance threads may run, and its idle threads.

    A thread is on the idle list exactly when it has nothing from this queue to do: `next_for` either gives it
    the next waiting call or lists it, under one lock, so a call never waits while a thread sleeps. With one
    instance (`instances` 1) there is nothing to choose: a call goes straight to that thread's own queue."""

    def __init__(self, instances: int) -> None:
        self._single = instances == 1
        self._only: InstanceThread | None = None
        self._lock = threading.Lock()
        self._waiting: deque[_Job] = deque()
        self._idle: list[InstanceThread] = []
        self._left: set[InstanceThread] = set()

    def submit(self, loop: asyncio.AbstractEventLoop, method: str, args: tuple[Any, ...],
               ran: RunTimes | None = None) -> asyncio.Future[Any]:
        """Call `method(*args)` on the model of the first free instance; `ran` gets when it ran there."""
        if self._only is not None:
            return self._only.submit(loop, method, args, ran)
        future = loop.create_future()
        self._enqueue((loop, future, method, args, _stamped(ran), True))
        return future

    def submit_then(self, then: Then, method: str, args: tuple[Any, ...], ran: RunTimes | None = None) -> None:
        """`submit` without a future (callable from any thread): the thread that runs the call hands its outcome
        to `then`, on that thread, instead of to the loop. `then` must not raise; what it raises is logged."""
        if ran is not None:  # (`_stamped` inline: a call saved per request)
            ran.queued_ns = time.perf_counter_ns()
        if self._only is not None:
            self._only.put((None, then, method, args, ran, False))
        else:
            self._enqueue((None, then, method, args, ran, True))

    def _enqueue(self, job: _Job) -> None:
        with self._lock:
            thread = self._idle.pop() if self._idle else None
            if thread is None:
                self._waiting.append(job)
        if thread is not None:
            thread.put(job)

    def join(self, thread: InstanceThread) -> None:
        """A new thread, idle."""
        with self._lock:
            self._idle.append(thread)
            if self._single:
                self._only = thread

    def next_for(self, thread: InstanceThread) -> _Job | None:
        """The next waiting call for `thread`, or None after listing it as idle (unless it left)."""
        with self._lock:
            if self._waiting:
                return self._waiting.popleft()
            if thread not in self._left:
                self._idle.append(thread)
            return None

    def leave(self, thread: InstanceThread) -> None:
        """`thread` takes no more calls from this queue (it may be finishing one: it is not listed again)."""
        with self._lock:
            self._left.add(thread)
            with contextlib.suppress(ValueError):
                self._idle.remove(thread)


class InstanceThread:
    """One instance's own thread: runs its calls one at a time, then the version's waiting calls, and hands
    each result back to the loop.

    An idle thread sleeps on an eventfd (`_bell`), rung only when it sleeps: `os.eventfd_write` releases the GIL
    around the wake-up, so the woken thread takes the GIL and runs at once instead of preempting the caller only to
    wait for its GIL (a `queue.SimpleQueue` wakes it with the GIL held: two more switches per hand-over, 10% of
    the 2-step chain's p50 at one request in flight). A call put on the event loop's thread rings it once the
    loop's current callback is over (`call_soon`): a batch of requests the loop hands out in one turn starts as
    one, where a ring per call let the thread take the GIL after each call, run it and sleep again, two switches
    per request at 16 in flight. A call put on another thread (a chain's next step) rings it at once."""

    def __init__(self, name: str, model: Any, calls: CallQueue, context: contextvars.Context | None = None) -> None:
        """`context`: the one its calls run in (a copy of the caller's when None); entered by this thread only."""
        self._model = model
        self._calls = calls
        self._jobs: deque[_Job | None] = deque()
        self._bell = os.eventfd(0, os.EFD_CLOEXEC)
        self._door = threading.Lock()  # held to ring the bell and to close it
        self._asleep = False
        calls.join(self)  # idle from the start (its own calls come through `submit`)
        context = contextvars.copy_context() if context is None else context
        self._thread = threading.Thread(target=context.run, args=(self._run,), name=name, daemon=True)
        self._thread.start()

    def submit(self, loop: asyncio.AbstractEventLoop, method: str, args: tuple[Any, ...],
               ran: RunTimes | None = None) -> asyncio.Future[Any]:
        """Call `method(*args)` on this instance's model, after the calls before it."""
        future = loop.create_future()
        self.put((loop, future, method, args, _stamped(ran), False))
        return future

    def put(self, job: _Job | None) -> None:
        self._jobs.append(job)
        if job is None:  # the end: rung at once, even with a ring on its way (its loop may stop before it)
            self._asleep = False
            self._ring()
        elif self._asleep:
            self._asleep = False
            loop = asyncio._get_running_loop()
            if loop is None:  # a model's thread carrying a chain: its next step starts now
                self._ring()
            else:  # the loop, maybe with more of a batch of calls to hand out: rung once they are all out
                loop.call_soon(self._ring)

    def _ring(self) -> None:
        with self._door:  # never after the thread closed its bell (the descriptor's number may be reused)
            if self._bell >= 0:
                os.eventfd_write(self._bell, 1)

    def shutdown(self) -> None:
        """Take nothing more from the version's queue; let the calls already here finish, then end the thread
        (without waiting for it)."""
        self._calls.leave(self)
        self.put(None)

    async def ended(self, within: float) -> bool:
        """After `shutdown`: wait, off the loop, up to `within` seconds for the thread to end (its frame, and the
        model it holds, let go). Whether it did."""
        await asyncio.to_thread(self._thread.join, within)
        return not self._thread.is_alive()

    def _run(self) -> None:
        jobs, model, calls, bell = self._jobs, self._model, self._calls, self._bell
        while True:
            if not jobs:
                self._asleep = True
                if not jobs:
                    os.eventfd_read(bell)
                    continue
                self._asleep = False
            job = jobs.popleft()
            if job is None:
                with self._door:
                    os.close(self._bell)
                    self._bell = -1
                self._model = None  # this thread and its queue refer to each other: the model must not wait on that
                return
            shared = job[5]
            _run_job(model, job)
            del job
            if shared:  # taken off the idle list for it: serve the version's queue until it is empty
                while (waiting := calls.next_for(self)) is not None:
                    _run_job(model, waiting)
                    del waiting


def _stamped(ran: RunTimes | None) -> RunTimes | None:
    if ran is not None:
        ran.queued_ns = time.perf_counter_ns()
    return ran


def _run_job(model: Any, job: _Job) -> None:
    """Call the job's method on `model` (on the calling thread) and hand the outcome to the job's future, or to
    its `then`."""
    loop, where, method, args, ran, _ = job
    if loop is not None and cast("asyncio.Future[Any]", where).cancelled():  # cancelled before it started: skip
        return  # it, as run_in_executor does
    if ran is not None:
        ran.started_ns = time.perf_counter_ns()
    try:
        result, ok = getattr(model, method)(*args), True
    except BaseException as exc:  # handed to the caller, like run_in_executor does
        result, ok = exc, False
    if ran is not None:
        ran.ended_ns = time.perf_counter_ns()
    del job, args
    if loop is None:
        then: Then = where  # type: ignore[assignment]  # (annotated rather than cast(): a call saved per request)
        try:
            then(ok, result)
        except Exception:  # a bug where the outcome goes must not end the instance's thread
            log.exception("handing a model call's outcome on failed")
        return
    with contextlib.suppress(RuntimeError):  # RuntimeError: the loop is closed, nobody waits any more
        loop.call_soon_threadsafe(deliver, cast("asyncio.Future[Any]", where), ok, result)
