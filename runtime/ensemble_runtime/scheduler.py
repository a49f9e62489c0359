"""Scheduling onto model instances: a shared queue, one worker per instance, optional dynamic batching.

Without batching, a request takes a free instance in its own task; instances that queue calls themselves (a
python model's threads, which share one queue) are handed each request at once, and the first free instance
runs the next, in the order of the calls."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.backends.base import InlineInstance, ModelInstance, QueuingInstance, RunTimes
from ensemble_runtime.backends.handoff import on_loop
from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError, internal, must_propagate, unavailable
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor, batch_size_of
from ensemble_runtime.stats import ComputeTimes, ModelStats

# What `submit_then` calls on the thread that ran the request (the instance's, or the loop for an instance that
# runs inline): the request's result, and what to call on the loop then.
Then = Callable[[BackendResult, Callable[[], None]], None]


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """Triton's dynamic_batching settings, resolved; `enabled` False means one request per execution."""

    enabled: bool = False
    max_batch_size: int = 0
    max_queue_delay_s: float = 0.0
    preferred_sizes: tuple[int, ...] = ()
    max_queue_size: int = 0  # 0 = unbounded
    default_timeout_s: float = 0.0  # 0 = none

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchPolicy:
        queue_policy = config.dynamic_batching.default_queue_policy
        batching = config.HasField("dynamic_batching") and config.max_batch_size > 0
        return cls(
            enabled=batching,
            max_batch_size=config.max_batch_size,
            max_queue_delay_s=config.dynamic_batching.max_queue_delay_microseconds / 1e6,
            preferred_sizes=tuple(sorted(config.dynamic_batching.preferred_batch_size)),
            max_queue_size=queue_policy.max_queue_size,
            default_timeout_s=queue_policy.default_timeout_microseconds / 1e6,
        )


@dataclass(slots=True)
class _Pending:
    request: BackendRequest
    batch: int
    enqueued_ns: int
    future: asyncio.Future[dict[str, Tensor]]
    deadline_ns: int = 0
    times: ComputeTimes | None = None  # where the caller sums compute phases (an ensemble request's steps)


@dataclass(slots=True)
class Scheduler:
    """Feeds one model version's instances from one queue; closes only after the queue drains."""

    model: str
    instances: list[ModelInstance]
    policy: BatchPolicy
    stats: ModelStats
    _queue: deque[_Pending] = field(default_factory=deque)
    _wakeup: asyncio.Condition = field(default_factory=asyncio.Condition)
    _workers: list[asyncio.Task[None]] = field(default_factory=list)
    _closing: bool = False
    _idle: list[ModelInstance] = field(default_factory=list)
    _slots: asyncio.Semaphore | None = None
    _waiting: int = 0
    _queuing: QueuingInstance | None = None
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
            return
        for index, instance in enumerate(self.instances):
            task = self._loop.create_task(
                self._work(instance), name=f"{self.model}-instance-{index}"
            )
            self._workers.append(task)

    async def submit(self, request: BackendRequest, times: ComputeTimes | None = None) -> dict[str, Tensor]:
        """Run `request` on an instance; on success its execution's compute phases are added to `times`."""
        if self._closing:
            raise unavailable(f"model '{self.model}' is unloading")
        if self._queuing is not None:
            return await self._submit_queued(self._queuing, request, times)
        if self._slots is not None:
            return await self._submit_direct(request, times)
        if self.policy.max_queue_size and len(self._queue) >= self.policy.max_queue_size:
            raise unavailable(
                f"model '{self.model}': request exceeds maximum queue size {self.policy.max_queue_size}"
            )
        now = time.perf_counter_ns()
        timeout_ns = int(self.policy.default_timeout_s * 1e9)
        pending = _Pending(
            request=request,
            batch=batch_size_of(request.inputs) if self.policy.max_batch_size else 1,
            enqueued_ns=now,
            future=asyncio.get_running_loop().create_future(),
            deadline_ns=now + timeout_ns if timeout_ns else 0,
            times=times,
        )
        async with self._wakeup:
            self._queue.append(pending)
            self._wakeup.notify()
        return await pending.future

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
            result = (await self._execute(instance.execute_queued([request], ran), 1))[0]
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
        instance = cast(InlineInstance, self._idle[-1])  # `_inlines`: every one is
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
        # Nothing yields from here to the end: the instance stays free for the others (as `_run_one` would leave
        # it). The phases as `_run_one` takes them: every one is counted, however short.
        start = time.perf_counter_ns()
        input_end = time.perf_counter_ns()
        try:
            result = self._counted(instance.execute_inline([request]), 1)[0]
        except BaseException as exc:
            result = self._failed(exc, 1)[0]
        output_start = time.perf_counter_ns()
        end = time.perf_counter_ns()
        compute = ComputeTimes(input_end - start, output_start - input_end, end - output_start)
        if times is not None:
            times.ran(start, input_end, output_start, end)
        then(result, functools.partial(self._count, request, result, 0, compute, times))

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
        return len(self._queue)

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
        async with self._wakeup:
            self._wakeup.notify_all()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        for instance in self.instances:
            with contextlib.suppress(Exception):
                await instance.close()

    async def _take_batch(self) -> list[_Pending] | None:
        async with self._wakeup:
            while not self._queue:
                if self._closing:
                    return None
                await self._wakeup.wait()
            batch = [self._queue.popleft()]
            if not self.policy.enabled:
                return batch
            size = batch[0].batch
            deadline = time.perf_counter() + self.policy.max_queue_delay_s
            while size < self.policy.max_batch_size:
                if size in self.policy.preferred_sizes:
                    break
                if self._queue:
                    if size + self._queue[0].batch > self.policy.max_batch_size:
                        break
                    item = self._queue.popleft()
                    batch.append(item)
                    size += item.batch
                    continue
                remaining = deadline - time.perf_counter()
                if remaining <= 0 or self._closing:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
            return batch

    async def _work(self, instance: ModelInstance) -> None:
        while True:
            batch = await self._take_batch()
            if batch is None:
                return
            await self._run(instance, batch)

    async def _run(self, instance: ModelInstance, batch: list[_Pending]) -> None:
        # Triton's phases as seen from here: compute input = taking the batch's requests (dropping those timed
        # out), compute infer = the instance's execute, compute output = handing each result to its caller.
        start = time.perf_counter_ns()
        live: list[_Pending] = []
        for item in batch:
            if item.deadline_ns and start > item.deadline_ns:
                item.future.set_exception(
                    InferenceError(ErrorCode.UNAVAILABLE, f"model '{self.model}': request timed out in queue")
                )
            elif not item.future.done():
                live.append(item)
        if not live:
            return
        requests = [item.request for item in live]
        input_end = time.perf_counter_ns()
        results = await self._execute(instance.execute(requests), len(requests))
        output_start = time.perf_counter_ns()
        succeeded: list[_Pending] = []
        for item, result in zip(live, results, strict=True):
            if item.future.done():
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
                if isinstance(result, ResponseError):  # answered by the model: it ran
                    succeeded.append(item)
            else:
                item.future.set_result(result)
                succeeded.append(item)
        if succeeded:
            self._record(live, succeeded, start, ComputeTimes(
                input_end - start, output_start - input_end, time.perf_counter_ns() - output_start
            ))

    async def _run_one(
        self, instance: ModelInstance, request: BackendRequest, enqueued_ns: int, times: ComputeTimes | None
    ) -> dict[str, Tensor]:
        """`_run` for a request its caller took an instance for (no batching): the same phases and statistics,
        without the queue's bookkeeping (no deadline, no future to hand the result over)."""
        start = time.perf_counter_ns()
        input_end = time.perf_counter_ns()
        result = (await self._execute(instance.execute([request]), 1))[0]
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

    async def _execute(self, execution: Awaitable[list[BackendResult]], count: int) -> list[BackendResult]:
        """One result per request of an `execute` call (`count` of them): the instance's, or the error that
        stands for it when the backend fails."""
        try:
            results = await execution
        except BaseException as exc:
            return self._failed(exc, count)
        return self._counted(results, count)

    def _failed(self, exc: BaseException, count: int) -> list[BackendResult]:
        """What stands for `count` results when an execution raised: a backend bug fails these requests, not the
        worker; SystemExit from a backend must not reach the loop (it ends the server)."""
        if isinstance(exc, Exception):
            return [exc] * count
        if must_propagate(exc):
            raise exc
        return [internal(f"model '{self.model}': execution raised {exc!r}")] * count

    def _counted(self, results: list[BackendResult], count: int) -> list[BackendResult]:
        if len(results) != count:
            return [internal(f"model '{self.model}' returned {len(results)} responses for {count} requests")] * count
        return results

    def _record(self, live: list[_Pending], succeeded: list[_Pending], start: int, compute: ComputeTimes) -> None:
        for item in succeeded:
            self.stats.record_request(item.batch, start - item.enqueued_ns, compute)
            if item.times is not None:
                item.times.add(compute)
                input_end = start + compute.input_ns
                output_start = input_end + compute.infer_ns
                item.times.ran(start, input_end, output_start, output_start + compute.output_ns)
        self.stats.record_execution(sum(item.batch for item in live), compute, time.time_ns() // 1_000_000)


def _queued_times(enqueued: int, ran: RunTimes, end: int) -> tuple[int, ComputeTimes]:
    """Queue time and compute phases of a call to queuing instances: compute input is the time to their queue
    (the inputs made ready), queue time the wait there, compute infer the run, compute output the way back."""
    if not ran.started_ns:  # it never ran on the instance's thread
        ran.queued_ns = ran.started_ns = enqueued
        ran.ended_ns = end
    compute = ComputeTimes(ran.queued_ns - enqueued, ran.ended_ns - ran.started_ns, end - ran.ended_ns)
    return ran.started_ns - ran.queued_ns, compute
