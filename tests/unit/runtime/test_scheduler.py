"""The scheduler with a stand-in instance at the backend seam."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from ensemble_runtime.batching import BatchPolicy
from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError
from ensemble_runtime.inference import BackendRequest, BackendResult
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.stats import ComputeTimes, ModelStats


class RecordingInstance:
    """Doubles its input; records batch sizes; can be held until released."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.batches: list[int] = []
        self.gate = gate
        self.closed = False

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.batches.append(len(requests))
        if self.gate is not None:
            await self.gate.wait()
        out: list[BackendResult] = []
        for r in requests:
            x = r.inputs["x"]
            out.append(ValueError("bad input") if float(x.sum()) < 0 else {"y": x * 2})
        return out

    async def close(self) -> None:
        self.closed = True


async def until(condition: Callable[[], object], turns: int = 1000) -> None:
    """Yield to the loop until the condition holds (bounded in turns, not time)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def req(value: float, batch: int = 1) -> BackendRequest:
    return BackendRequest({"x": np.full((batch, 2), value, np.float32)}, ("y",))


def test_requests_batch_together_up_to_max() -> None:
    async def run() -> None:
        gate = asyncio.Event()
        instance = RecordingInstance(gate)
        stats = ModelStats()
        sched = Scheduler("m", [instance], BatchPolicy(True, 4, 0.0), stats)
        sched.start()
        first = asyncio.ensure_future(sched.submit(req(1)))
        await until(lambda: instance.batches)
        # while the first execution is held, six more requests queue up
        rest = [asyncio.ensure_future(sched.submit(req(i))) for i in range(2, 8)]
        await asyncio.sleep(0)
        gate.set()
        results = await asyncio.gather(first, *rest)
        assert [float(r["y"][0, 0]) for r in results] == [2.0 * i for i in range(1, 8)]
        assert instance.batches == [1, 4, 2]
        assert stats.execution_count == 3 and stats.inference_count == 7
        await sched.close()
        assert instance.closed

    asyncio.run(run())


def test_preferred_size_dispatches_early() -> None:
    async def run() -> None:
        instance = RecordingInstance()
        sched = Scheduler("m", [instance], BatchPolicy(True, 8, 10.0, preferred_sizes=(2,)), ModelStats())
        sched.start()
        # a 10 s queue delay would hang the test if the preferred size did not dispatch at once
        await asyncio.wait_for(asyncio.gather(sched.submit(req(1)), sched.submit(req(2))), 2.0)
        assert instance.batches == [2]
        await sched.close()

    asyncio.run(run())


def test_error_fails_only_its_request() -> None:
    async def run() -> None:
        sched = Scheduler("m", [RecordingInstance()], BatchPolicy(True, 4, 0.01), ModelStats())
        sched.start()
        good, bad = await asyncio.gather(sched.submit(req(1)), sched.submit(req(-1)), return_exceptions=True)
        assert isinstance(good, dict)
        assert isinstance(bad, ValueError)
        await sched.close()

    asyncio.run(run())


def test_queue_limit_rejects_with_unavailable() -> None:
    async def run() -> None:
        gate = asyncio.Event()
        sched = Scheduler("m", [RecordingInstance(gate)], BatchPolicy(False, 0, max_queue_size=1), ModelStats())
        sched.start()
        instance = sched.instances[0]
        running = asyncio.ensure_future(sched.submit(req(1)))
        await until(lambda: getattr(instance, "batches", None))
        queued = asyncio.ensure_future(sched.submit(req(2)))
        await asyncio.sleep(0)
        with pytest.raises(InferenceError, match="exceeds maximum queue size 1") as info:
            await sched.submit(req(3))
        assert info.value.code == ErrorCode.UNAVAILABLE
        gate.set()
        await asyncio.gather(running, queued)
        await sched.close()

    asyncio.run(run())


def test_instances_run_in_parallel() -> None:
    async def run() -> None:
        gate = asyncio.Event()
        a, b = RecordingInstance(gate), RecordingInstance(gate)
        sched = Scheduler("m", [a, b], BatchPolicy(), ModelStats())
        sched.start()
        calls = [asyncio.ensure_future(sched.submit(req(i))) for i in (1, 2)]
        await until(lambda: a.batches and b.batches)
        assert a.batches == [1] and b.batches == [1]  # both held at once: two executions in flight
        gate.set()
        await asyncio.gather(*calls)
        await sched.close()

    asyncio.run(run())


class AnsweringInstance(RecordingInstance):
    """As RecordingInstance, and answers x == 0 with the model's own error response; x == 9 breaks the backend."""

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if any(float(r.inputs["x"].sum()) == 9 * r.inputs["x"].size for r in requests):
            raise RuntimeError("backend broke")
        results = await super().execute(requests)
        return [ResponseError(ErrorCode.INVALID_ARGUMENT, "zero") if float(r.inputs["x"].sum()) == 0 else result
                for r, result in zip(requests, results, strict=True)]


def test_direct_requests_count_in_statistics_as_triton_does() -> None:
    """Without batching a request runs in its caller's task: a success, or the model's own error response,
    counts a request (its batch) and an execution, and adds its phases to the caller's ComputeTimes; a failure
    counts nothing here (the data plane counts it in `fail`)."""

    async def run() -> None:
        stats = ModelStats()
        sched = Scheduler("m", [AnsweringInstance()], BatchPolicy(False, 8), stats)
        sched.start()
        times = ComputeTimes()
        assert (await sched.submit(req(1, batch=3), times))["y"].tolist() == [[2.0, 2.0]] * 3
        with pytest.raises(ResponseError, match="zero"):
            await sched.submit(req(0, batch=2), times)
        with pytest.raises(ValueError, match="bad input"):
            await sched.submit(req(-1))
        with pytest.raises(RuntimeError, match="backend broke"):
            await sched.submit(req(9))
        assert (stats.inference_count, stats.execution_count) == (5, 2)
        assert stats.queue.count == stats.compute_input.count == stats.compute_infer.count == 2
        assert stats.compute_output.count == 2
        assert sorted(stats.batches) == [2, 3]
        assert all(b.compute_infer.count == 1 for b in stats.batches.values())
        assert times.infer_ns == stats.compute_infer.ns > 0
        assert times.input_ns == stats.compute_input.ns and times.output_ns == stats.compute_output.ns
        assert stats.last_inference_ms > 0
        await sched.close()

    asyncio.run(run())


class InlineInstance(AnsweringInstance):
    """As AnsweringInstance, and runs inline (on the caller's thread) while `inline` is set; records that thread.
    x == 7 raises SystemExit, as a model may."""

    def __init__(self, inline: bool = True) -> None:
        super().__init__()
        self.inline = inline
        self.threads: list[int] = []

    def runs_inline(self) -> bool:
        return self.inline

    def execute_inline(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.threads.append(threading.get_ident())
        if any(float(r.inputs["x"].sum()) == 7 * r.inputs["x"].size for r in requests):
            raise SystemExit(3)
        coroutine = self.execute(requests)
        try:
            coroutine.send(None)  # never suspends without a gate
        except StopIteration as done:
            return list(done.value)
        raise AssertionError("execute suspended")

    def execute_one(self, request: BackendRequest) -> BackendResult:
        return self.execute_inline([request])[0]


def _then_outcomes(sched: Scheduler, value: float, batch: int = 1) -> tuple[list[BackendResult], list[Callable[[], None]]]:
    """`submit_then` one request; what `then` got (result, and the settle to call), as soon as it returns."""
    results: list[BackendResult] = []
    settles: list[Callable[[], None]] = []

    def then(result: BackendResult, settle: Callable[[], None]) -> None:
        results.append(result)
        settles.append(settle)

    sched.submit_then(req(value, batch), then)
    return results, settles


def test_an_instance_that_runs_inline_takes_requests_without_a_task() -> None:
    """A free instance that runs inline (a fast ONNX model) runs `submit_then`'s request on the loop before it
    returns; its statistics are counted by `settle`, as `submit` counts them (failures are the data plane's)."""

    async def run() -> None:
        stats = ModelStats()
        instance = InlineInstance()
        sched = Scheduler("m", [instance], BatchPolicy(False, 8), stats)
        sched.start()
        assert sched.takes_then()
        results, settles = _then_outcomes(sched, 1, batch=3)
        assert instance.threads == [threading.get_ident()]
        assert isinstance(results[0], dict) and results[0]["y"].tolist() == [[2.0, 2.0]] * 3
        assert stats.inference_count == 0  # nothing counted before settle
        settles[0]()
        assert (stats.inference_count, stats.execution_count) == (3, 1)
        assert stats.compute_infer.count == 1 and stats.compute_infer.ns > 0
        results, settles = _then_outcomes(sched, 0)  # the model's own error response: it ran, it counts
        assert isinstance(results[0], ResponseError)
        settles[0]()
        for value, kind in ((-1, ValueError), (9, RuntimeError), (7, InferenceError)):  # failures count nothing
            results, settles = _then_outcomes(sched, value)
            assert isinstance(results[0], kind), results
            settles[0]()
        assert "SystemExit" in str(results[0])
        assert (stats.inference_count, stats.execution_count) == (4, 2)
        assert (await sched.submit(req(2)))["y"].tolist() == [[4.0, 4.0]]  # the task path still serves
        await sched.close()
        assert instance.closed

    asyncio.run(run())


def test_inline_instances_take_requests_only_when_free_and_fast() -> None:
    """No `submit_then` while the instance would not run inline (slow executions go to its thread), while a
    request waits for an instance, or while unloading: the data plane keeps the task path for those."""

    async def run() -> None:
        instance = InlineInstance(inline=False)
        sched = Scheduler("m", [instance], BatchPolicy(False, 8), ModelStats())
        sched.start()
        assert not sched.takes_then()
        with pytest.raises(InferenceError, match="no instance takes a request without a task"):
            _then_outcomes(sched, 1)
        instance.inline = True
        assert sched.takes_then()
        instance.gate = asyncio.Event()  # the task path holds the only instance...
        held = asyncio.ensure_future(sched.submit(req(1)))
        await until(lambda: instance.batches)
        assert not sched.takes_then()
        waiting = asyncio.ensure_future(sched.submit(req(2)))  # ...another request waits for it
        await asyncio.sleep(0)
        instance.gate.set()
        await asyncio.gather(held, waiting)
        assert sched.takes_then()
        closing = asyncio.ensure_future(sched.close())
        await asyncio.sleep(0)
        with pytest.raises(InferenceError, match="unloading"):
            _then_outcomes(sched, 1)
        await closing

    asyncio.run(run())


def test_instances_that_do_not_run_inline_take_no_requests_without_a_task() -> None:
    """An instance without `runs_inline` (any backend but ONNX Runtime) never does."""

    async def run() -> None:
        sched = Scheduler("m", [AnsweringInstance()], BatchPolicy(False, 8), ModelStats())
        sched.start()
        assert not sched.takes_then()
        await sched.close()

    asyncio.run(run())


@pytest.mark.parametrize("batching", [True, False])
def test_pending_counts_the_requests_waiting_for_an_instance(batching: bool) -> None:
    """nv_inference_pending_request_count: with the one instance held, the requests behind it are pending
    (in the batch queue, or waiting for the instance), the running one is not; none once all are answered."""

    async def run() -> None:
        gate = asyncio.Event()
        instance = RecordingInstance(gate)
        sched = Scheduler("m", [instance], BatchPolicy(batching, 1 if batching else 0, 0.0), ModelStats())
        sched.start()
        assert sched.pending() == 0
        first = asyncio.ensure_future(sched.submit(req(1)))
        await until(lambda: instance.batches)
        rest = [asyncio.ensure_future(sched.submit(req(i))) for i in (2, 3, 4)]
        await until(lambda: sched.pending() == 3)
        gate.set()
        await asyncio.gather(first, *rest)
        assert instance.batches == [1, 1, 1, 1] and sched.pending() == 0
        await sched.close()

    asyncio.run(run())
