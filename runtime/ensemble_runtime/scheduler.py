"""Scheduling onto model instances: direct, handed on at once, or through dynamic batching's queue.

Without batching, a request takes a free instance in its own task; instances that queue calls themselves (a
python model's threads, which share one queue) are handed each request at once, and the first free instance
runs the next, in the order of the calls. With batching, `batching.BatchQueue` feeds them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ensemble_runtime.backends.base import InlineInstance, ModelInstance, QueuingInstance, RunTimes
from ensemble_runtime.backends.handoff import on_loop
from ensemble_runtime.batching import BatchPolicy, BatchQueue
from ensemble_runtime.errors import ResponseError, internal, unavailable
from ensemble_runtime.executions import execution_results, failed_results
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor, batch_size_of
from ensemble_runtime.stats import ComputeTimes, ModelStats

# What `submit_then` calls on the thread that ran the request (the instance's, or the loop for an instance that
# runs inline): the request's result, and what to call on the loop then.
Then = Callable[[BackendResult, Callable[[], None]], None]


@dataclass(slots=True)
class Scheduler:
    """Feeds one model version's instances from one queue; closes only after the queue drains."""

    model: str
    instances: list[ModelInstance]
    policy: BatchPolicy
    stats: ModelStats
    _batches: BatchQueue | None = None  # with dynamic batching: its queue and workers
    _closing: bool = False
    _idle: list[ModelInstance] = field(default_factory=list)
    _slots: asyncio.Semaphore | None = None
    _waiting: int = 0
    _queuing: QueuingInstance | None = None
    # whether its instances queue calls on their own threads (set by `start`; read, not called, per request: such a
    # request is handed on, never run inline)
    hands_on: bool = False
    _outstanding: int = 0  # calls handed to the queuing instance and not yet back
    _drained: asyncio.Event | None = None  # made by `close` while calls are out; set as the last comes back
    _inlines: bool = False  # every instance may run inline (InlineInstance), checked once at start
    _admission: threading.Lock = field(default_factory=threading.Lock)  # `_outstanding` and `_closing`, off the loop
    _loop: asyncio.AbstractEventLoop | None = None  # the loop it serves (`start`), and its thread
    _loop_thread: int = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if not self.policy.enabled:
            # Without batching a request needs only a free instance: take one directly in the caller's
            # task (no queue hand-off, no worker wake-up); wait on the semaphore when all are busy.
            self._idle = list(self.instances)
            self._slots = asyncio.Semaphore(len(self.instances))
            self._inlines = all(isinstance(i, InlineInstance) for i in self.instances)
            queuing = [i for i in self.instances if isinstance(i, QueuingInstance) and i.queues_calls()]
            if len(queuing) == len(self.instances):
                # Their threads are the queue: the next execution starts as one ends, with no round trip
                # through the loop in between (a semaphore here would cost one per request).
                self._queuing = queuing[0]
                self.hands_on = True
            return
        self._batches = BatchQueue(self.model, self.instances, self.policy, self.stats)
        self._batches.start(self._loop)

    async def submit(self, request: BackendRequest, times: ComputeTimes | None = None) -> dict[str, Tensor]:
        """Run `request` on an instance; on success its execution's compute phases are added to `times`."""
        if self._closing:
            raise unavailable(f"model '{self.model}' is unloading")
        if self._queuing is not None:
            return await self._submit_queued(self._queuing, request, times)
        if self._slots is not None:
            return await self._submit_direct(request, times)
        if self._batches is None:
            raise internal(f"model '{self.model}': the scheduler has not started")
        return await self._batches.submit(request, times)

    async def _submit_direct(self, request: BackendRequest, times: ComputeTimes | None) -> dict[str, Tensor]:
        assert self._slots is not None
        if self.policy.max_queue_size and self._waiting >= self.policy.max_queue_size and not self._idle:
            raise unavailable(
                f"model '{self.model}': request exceeds maximum queue size {self.policy.max_queue_size}"
            )
        enqueued = time.perf_counter_ns()
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        instance = self._idle.pop()
        try:
            return await self._run_one(instance, request, enqueued, times)
        finally:
            self._idle.append(instance)
            self._slots.release()

    async def _submit_queued(
        self, instance: QueuingInstance, request: BackendRequest, times: ComputeTimes | None
    ) -> dict[str, Tensor]:
        """`_submit_direct` for instances that queue calls themselves: the same queue limit (the calls not yet
        running) and statistics. Compute input is the time to their queue (the inputs made ready), queue time the
        wait there, compute infer the run on an instance, compute output the way back."""
        enqueued = self._enter_queued()
        ran = RunTimes()
        try:
            result = (await execution_results(self.model, instance.execute_queued([request], ran), 1))[0]
        finally:
            self._leave_queued()
        end = time.perf_counter_ns()
        queue_ns, compute = _queued_times(enqueued, ran, end)
        if times is not None:  # a trace's compute is the run on the instance's thread: its inputs were ready
            times.ran(ran.started_ns, ran.started_ns, ran.ended_ns, end)
        return self._finish(request, result, queue_ns, compute, times)

    def takes_then(self) -> bool:
        """Whether `submit_then` can run a request now: the instances queue calls on their own threads, or a free
        one runs inline (on the loop, before `submit_then` returns) and nobody waits for one."""
        return self._queuing is not None or self._inline() is not None

    def _inline(self) -> InlineInstance | None:
        if not self._inlines or self._waiting or not self._idle:
            return None
        # `_inlines`: every one is; annotated rather than cast(), a call saved twice per request
        instance: InlineInstance = self._idle[-1]  # type: ignore[assignment]
        return instance if instance.runs_inline() else None

    def submit_then(self, request: BackendRequest, then: Then, times: ComputeTimes | None = None) -> None:
        """`submit` without a task, where `takes_then` says so: on the loop, it refuses what `submit` refuses
        (raising the same errors) and hands the request on; the thread that runs it then calls
        `then(result, settle)`, where `settle`, to be called on the loop, counts the request in the statistics
        and frees its place in the queue, as `submit` does when it returns (adding the compute phases to `times`)."""
        if self._closing:
            raise unavailable(f"model '{self.model}' is unloading")
        if self._queuing is not None:
            self._submit_queued_then(self._queuing, request, then, times)
            return
        instance = self._inline()
        if instance is None:
            raise internal(f"model '{self.model}': no instance takes a request without a task now")
        result, compute = self._run_here(instance, request, times)
        then(result, functools.partial(self._count, request, result, 0, compute, times))

    def run_inline(self, request: BackendRequest) -> BackendResult | None:
        """`submit_then` without its callback, where a free instance runs inline now: on the loop, the request
        runs before this returns, which counts its execution (what `submit_then`'s `settle` counts) and returns
        its result, its outputs or the error; it refuses what `submit` refuses (raising the same errors). None:
        no instance runs it so now, and nothing was done."""
        if self._closing:
            raise unavailable(f"model '{self.model}' is unloading")
        instance = self._inline() if self._queuing is None else None
        if instance is None:
            return None
        result, compute = self._run_here(instance, request, None)
        self._count(request, result, 0, compute, None)
        return result

    def _run_here(
        self, instance: InlineInstance, request: BackendRequest, times: ComputeTimes | None
    ) -> tuple[BackendResult, ComputeTimes]:
        """One request on `instance`, on this thread (the loop), and the phases of its execution."""
        # Nothing yields from here to the end: the instance stays free for the others (as `_run_one` would leave
        # it). The phases as `_run_one` takes them: every one is counted, however short.
        start = time.perf_counter_ns()
        input_end = time.perf_counter_ns()
        try:
            result = instance.execute_one(request)
        except BaseException as exc:
            result = failed_results(self.model, exc, 1)[0]
        output_start = time.perf_counter_ns()
        end = time.perf_counter_ns()
        if times is not None:
            times.ran(start, input_end, output_start, end)
        return result, ComputeTimes(input_end - start, output_start - input_end, end - output_start)

    def submit_then_off_loop(self, request: BackendRequest, then: Then, times: ComputeTimes | None = None) -> bool:
        """`submit_then` from a thread other than the loop's (a model's, carrying an ensemble request on to its
        next step), for instances that queue calls themselves; raises what `submit_then` raises (a full queue, a
        version closing: checked under the admission lock, as `close` sets it). False: these instances take
        requests only on the loop (nothing was done)."""
        if self._queuing is None:
            return False
        self._submit_queued_then(self._queuing, request, then, times)
        return True

    def _submit_queued_then(
        self, queuing: QueuingInstance, request: BackendRequest, then: Then, times: ComputeTimes | None
    ) -> None:
        """Any thread: the admission is under a lock, and a hand-over that failed leaves the queue on the loop."""
        enqueued = self._enter_queued()
        ran = RunTimes()

        def finished(result: BackendResult) -> None:  # on the instance's thread
            end = time.perf_counter_ns()
            then(result, functools.partial(self._settle_queued, request, result, enqueued, ran, end, times))

        try:
            queuing.execute_then(request, ran, finished)
        except BaseException:
            assert self._loop is not None
            on_loop(self._loop, self._loop_thread, self._leave_queued)
            raise

    def _enter_queued(self) -> int:
        """A call for the queuing instances (any thread): refused when the queue is full (one runs per instance,
        `limit` wait) or the version is closing; the time it came."""
        limit = self.policy.max_queue_size
        with self._admission:
            if self._closing:
                raise unavailable(f"model '{self.model}' is unloading")
            if limit and self._outstanding >= limit + len(self.instances):
                raise unavailable(f"model '{self.model}': request exceeds maximum queue size {limit}")
            self._outstanding += 1
        return time.perf_counter_ns()

    def _leave_queued(self) -> None:
        """On the loop."""
        with self._admission:
            self._outstanding -= 1
        if not self._outstanding and self._drained is not None:
            self._drained.set()
            self._drained = None

    def _settle_queued(self, request: BackendRequest, result: BackendResult, enqueued: int, ran: RunTimes,
                       end: int, times: ComputeTimes | None) -> None:
        self._leave_queued()
        queue_ns, compute = _queued_times(enqueued, ran, end)
        if times is not None:
            times.ran(ran.started_ns, ran.started_ns, ran.ended_ns, end)
        self._count(request, result, queue_ns, compute, times)

    def pending(self) -> int:
        """Requests waiting for an instance, not yet running (Triton's `nv_inference_pending_request_count`).
        On instance threads' shared queue a call waits only while every instance is busy."""
        if self._queuing is not None:
            return max(0, self._outstanding - len(self.instances))
        if self._slots is not None:
            return self._waiting
        return self._batches.pending() if self._batches is not None else 0

    async def close(self) -> None:
        """Stop taking requests, finish what is queued, stop the workers and the instances."""
        with self._admission:
            self._closing = True
        if self._queuing is not None:
            while self._outstanding:
                if self._drained is None:
                    self._drained = asyncio.Event()
                await self._drained.wait()
        elif self._slots is not None:
            for _ in self.instances:  # every instance back: nothing in flight any more
                await self._slots.acquire()
        if self._batches is not None:
            await self._batches.close()
        for instance in self.instances:
            with contextlib.suppress(Exception):
                await instance.close()

    async def _run_one(
        self, instance: ModelInstance, request: BackendRequest, enqueued_ns: int, times: ComputeTimes | None
    ) -> dict[str, Tensor]:
        """`_run` for a request its caller took an instance for (no batching): the same phases and statistics,
        without the queue's bookkeeping (no deadline, no future to hand the result over)."""
        start = time.perf_counter_ns()
        input_end = time.perf_counter_ns()
        result = (await execution_results(self.model, instance.execute([request]), 1))[0]
        output_start = time.perf_counter_ns()
        end = time.perf_counter_ns()
        compute = ComputeTimes(input_end - start, output_start - input_end, end - output_start)
        if times is not None:
            times.ran(start, input_end, output_start, end)
        return self._finish(request, result, start - enqueued_ns, compute, times)

    def _finish(
        self, request: BackendRequest, result: BackendResult, queue_ns: int, compute: ComputeTimes,
        times: ComputeTimes | None,
    ) -> dict[str, Tensor]:
        """One request's statistics (the execution's too: one request each) and its outputs or error."""
        self._count(request, result, queue_ns, compute, times)
        if isinstance(result, BaseException):
            raise result
        return result

    def _count(self, request: BackendRequest, result: BackendResult, queue_ns: int, compute: ComputeTimes,
               times: ComputeTimes | None) -> None:
        """The statistics of a request that ran: a success, or the model's own error response. A failure has none
        here (the caller counts it)."""
        if isinstance(result, BaseException) and not isinstance(result, ResponseError):
            return
        batch = batch_size_of(request.inputs) if self.policy.max_batch_size else 1
        self.stats.record_alone(batch, queue_ns, compute, time.time_ns() // 1_000_000)
        if times is not None:
            times.add(compute)


def _queued_times(enqueued: int, ran: RunTimes, end: int) -> tuple[int, ComputeTimes]:
    """Queue time and compute phases of a call to queuing instances: compute input is the time to their queue
    (the inputs made ready), queue time the wait there, compute infer the run, compute output the way back."""
    if not ran.started_ns:  # it never ran on the instance's thread
        ran.queued_ns = ran.started_ns = enqueued
        ran.ended_ns = end
    compute = ComputeTimes(ran.queued_ns - enqueued, ran.ended_ns - ran.started_ns, end - ran.ended_ns)
    return ran.started_ns - ran.queued_ns, compute
