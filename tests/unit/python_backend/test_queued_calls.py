"""Python instances queue calls on their own threads: the scheduler hands them each request at once. One instance
runs them in order, one at a time; several share one queue and a free one takes the next. With Triton's queue
limit, statistics and unload (the real backend and its threads; the scheduler over them)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ensemble_runtime.backends.base import QueuingInstance
from ensemble_runtime.batching import BatchPolicy
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import BackendRequest, Tensor
from ensemble_runtime.responses import ResponseChannel
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.stats import ModelStats

from .conftest import Harness, Run


def request(x: int, gate: Path | None = None) -> BackendRequest:
    parameters: dict[str, Any] = {"gate": str(gate)} if gate is not None else {}
    return BackendRequest({"X": np.array([x], dtype=np.int32)}, (), parameters=parameters)


def finalized(repo: Path) -> list[str]:
    """What each instance's finalize wrote: executions it finished, and whether it ran on the thread that ran
    initialize."""
    return [path.read_text() for path in sorted((repo / "queued").glob("finalized-*"))]


def with_instances(repo: Path, count: int) -> None:
    config = repo / "queued" / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", f"count: {count}"))


def values(outputs: dict[str, Tensor]) -> tuple[int, int, int]:
    return int(outputs["X_OUT"][0]), int(outputs["ORDER"][0]), int(outputs["ACTIVE"][0])


def test_which_python_instances_queue_calls(run: Run) -> None:
    """Only a synchronous execute that is not inline runs on the instance's thread (decoupled or not)."""

    async def body(h: Harness) -> None:
        kinds = {name: (await h.load(name))[0] for name in ("queued", "async_add", "inline")}
        queuing = {name: isinstance(i, QueuingInstance) and i.queues_calls() for name, i in kinds.items()}
        assert queuing == {"queued": True, "async_add": False, "inline": False}

    run(body)


def test_calls_run_in_order_one_at_a_time_while_held(run: Run, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        stats = ModelStats()
        sched = Scheduler("queued", await h.load("queued"), BatchPolicy(), stats)
        sched.start()
        gate = tmp_path / "open"
        first = asyncio.ensure_future(sched.submit(request(0, gate)))
        rest = [asyncio.ensure_future(sched.submit(request(x))) for x in range(1, 6)]
        await asyncio.sleep(0)  # each call has run up to its first wait: queued, its queue time counting
        queued = time.perf_counter_ns()
        await asyncio.sleep(0.05)
        assert not first.done() and not any(r.done() for r in rest)  # all behind the held one
        held_ns = time.perf_counter_ns() - queued
        gate.touch()
        results = [values(r) for r in await asyncio.gather(first, *rest)]
        assert results == [(x, x + 1, 1) for x in range(6)]  # in order of the calls, never two at once
        assert stats.inference_count == stats.execution_count == 6
        assert stats.queue.count == stats.compute_infer.count == 6
        # The five behind the held one each waited in the queue for at least as long as it was held.
        assert stats.queue.ns >= 5 * held_ns
        await sched.close()

    run(body)


@pytest.mark.parametrize("instances", [1, 2])
def test_queue_limit_counts_the_calls_waiting_for_an_instance(
    run: Run, repo: Path, tmp_path: Path, instances: int
) -> None:
    """With a limit of 2, two calls may wait behind those running (one per instance); one more is refused."""
    with_instances(repo, instances)

    async def body(h: Harness) -> None:
        sched = Scheduler("queued", await h.load("queued"), BatchPolicy(max_queue_size=2), ModelStats())
        sched.start()
        gate = tmp_path / "open"
        calls = [asyncio.ensure_future(sched.submit(request(x, gate))) for x in range(instances + 2)]
        await asyncio.sleep(0)
        with pytest.raises(InferenceError, match="exceeds maximum queue size 2") as refused:
            await sched.submit(request(9))
        assert refused.value.code == ErrorCode.UNAVAILABLE
        gate.touch()
        assert [values(r)[0] for r in await asyncio.gather(*calls)] == list(range(instances + 2))
        assert values(await sched.submit(request(7)))[0] == 7  # room again
        await sched.close()

    run(body)


def test_a_failing_call_leaves_the_ones_behind_it_alone(run: Run) -> None:
    async def body(h: Harness) -> None:
        sched = Scheduler("queued", await h.load("queued"), BatchPolicy(), ModelStats())
        sched.start()
        broken = BackendRequest({"Y": np.array([1], dtype=np.int32)}, ())  # no X: execute raises
        calls = [sched.submit(request(1)), sched.submit(broken), sched.submit(request(2))]
        first, failed, last = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(failed, InferenceError) and failed.code == ErrorCode.INTERNAL
        assert not isinstance(first, BaseException) and not isinstance(last, BaseException)
        assert values(first)[0] == 1 and values(last)[0] == 2
        await sched.close()

    run(body)


def test_unload_waits_for_queued_calls_then_finalizes(run: Run, repo: Path, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        sched = Scheduler("queued", await h.load("queued"), BatchPolicy(), ModelStats())
        sched.start()
        gate = tmp_path / "open"
        calls = [asyncio.ensure_future(sched.submit(request(x, gate))) for x in range(3)]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(sched.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        with pytest.raises(InferenceError, match="unloading"):
            await sched.submit(request(9))
        gate.touch()
        assert [values(r)[0] for r in await asyncio.gather(*calls)] == [0, 1, 2]
        await closing
        assert finalized(repo) == ["3 True"]  # after the three, on the instance's own thread

    run(body)


def test_a_decoupled_model_queues_calls_and_answers_each_through_its_channel(run: Run, repo: Path) -> None:
    with (repo / "queued" / "config.pbtxt").open("a") as config:
        config.write("model_transaction_policy { decoupled: true }\n")

    async def body(h: Harness) -> None:
        stats = ModelStats()
        instances = await h.load("queued")
        assert isinstance(instances[0], QueuingInstance) and instances[0].queues_calls()
        sched = Scheduler("queued", instances, BatchPolicy(), stats)
        sched.start()
        loop = asyncio.get_running_loop()
        channels = [ResponseChannel(loop) for _ in range(4)]
        calls = [sched.submit(dataclasses.replace(request(x), responses=c)) for x, c in enumerate(channels)]
        assert await asyncio.gather(*calls) == [{}] * 4  # each call ends when its execute returns
        for x, channel in enumerate(channels):
            items = [item async for item in channel.items()]
            assert [item.final for item in items] == [False, True]
            assert [values(item.outputs) for item in items if item.outputs is not None] == [
                (x, x + 1, 1), (x + 100, x + 1, 1)]  # in order of the calls, never two at once
        assert stats.execution_count == 4 and stats.queue.count == 4
        await sched.close()

    run(body)


def test_with_several_instances_a_free_one_takes_the_next_call(run: Run, repo: Path, tmp_path: Path) -> None:
    """Two instances share one queue: while one is held, the other runs every call behind it, in order."""
    with_instances(repo, 2)

    async def body(h: Harness) -> None:
        stats = ModelStats()
        instances = await h.load("queued")
        assert len(instances) == 2
        assert all(isinstance(i, QueuingInstance) and i.queues_calls() for i in instances)
        sched = Scheduler("queued", instances, BatchPolicy(), stats)
        sched.start()
        gate = tmp_path / "open"
        held = asyncio.ensure_future(sched.submit(request(0, gate)))
        rest = [values(r) for r in await asyncio.gather(*(sched.submit(request(x)) for x in range(1, 6)))]
        assert not held.done()  # the five ran on the other instance, around the held one
        assert rest == [(x, x, 1) for x in range(1, 6)]  # its executions 1..5, one at a time
        gate.touch()
        assert values(await held) == (0, 1, 1)  # the first execution of the held instance
        assert stats.execution_count == 6 and stats.queue.count == 6
        await sched.close()
        assert sorted(finalized(repo)) == ["1 True", "5 True"]  # each instance's finalize on its own thread

    run(body)
