"""Dynamic batching: one queue for a model version, one worker per instance taking batches from it.

Triton's dynamic_batching as the scheduler runs it when a model enables it: a batch grows up to the largest
size, stops at a preferred size, and waits at most the queue delay for more; a request past its queue timeout
is refused when its batch is taken."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.backends.base import ModelInstance
from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError, unavailable
from ensemble_runtime.executions import execution_results
from ensemble_runtime.inference import BackendRequest, Tensor, batch_size_of
from ensemble_runtime.stats import ComputeTimes, ModelStats


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
class BatchQueue:
    """The queue and its workers, on the loop; `close` lets the workers finish what is queued, then stops them."""

    model: str
    instances: list[ModelInstance]
    policy: BatchPolicy
    stats: ModelStats
    _queue: deque[_Pending] = field(default_factory=deque)
    _wakeup: asyncio.Condition = field(default_factory=asyncio.Condition)
    _workers: list[asyncio.Task[None]] = field(default_factory=list)
    _closing: bool = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        for index, instance in enumerate(self.instances):
            self._workers.append(loop.create_task(self._work(instance), name=f"{self.model}-instance-{index}"))

    async def submit(self, request: BackendRequest, times: ComputeTimes | None) -> dict[str, Tensor]:
        """Queue `request` and wait for its batch to run; refused when the queue is full."""
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

    def pending(self) -> int:
        return len(self._queue)

    async def close(self) -> None:
        self._closing = True
        async with self._wakeup:
            self._wakeup.notify_all()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)

    async def _take_batch(self) -> list[_Pending] | None:
        async with self._wakeup:
            while not self._queue:
                if self._closing:
                    return None
                await self._wakeup.wait()
            batch = [self._queue.popleft()]
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
        results = await execution_results(self.model, instance.execute(requests), len(requests))
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

    def _record(self, live: list[_Pending], succeeded: list[_Pending], start: int, compute: ComputeTimes) -> None:
        for item in succeeded:
            self.stats.record_request(item.batch, start - item.enqueued_ns, compute)
            if item.times is not None:
                item.times.add(compute)
                input_end = start + compute.input_ns
                output_start = input_end + compute.infer_ns
                item.times.ran(start, input_end, output_start, output_start + compute.output_ns)
        self.stats.record_execution(sum(item.batch for item in live), compute, time.time_ns() // 1_000_000)
