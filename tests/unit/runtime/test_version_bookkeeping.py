"""The per-request bookkeeping of loaded versions, kept cheap on the hot path: in-flight counts that make a waiter
only when someone waits for idle, an ensemble's version-set description computed once per set, a request's
statistics in one call, and the default-version lookup that skips the version string's parsing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from ensemble_runtime.backends.base import RunTimes
from ensemble_runtime.batching import BatchPolicy
from ensemble_runtime.config.model_config import parse_config_text
from ensemble_runtime.ensemble.graph import build_graph
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import BackendRequest, BackendResult
from ensemble_runtime.registry import EnsembleState, LoadedVersion, ModelRecord, Registry
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.stats import ComputeTimes, ModelStats

STEP = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
CHAIN = """
name: "chain"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "a" model_version: -1 input_map { key: "X" value: "IN" } output_map { key: "Y" value: "t" } },
  { model_name: "b" model_version: -1 input_map { key: "X" value: "t" } output_map { key: "Y" value: "OUT" } }
] }
"""


def version(name: str, number: int, text: str | None = None) -> LoadedVersion:
    config = parse_config_text(text if text is not None else STEP.format(name=name))
    return LoadedVersion(model=name, version=number, config=config, scheduler=None)


async def turns(count: int = 20) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_wait_idle_returns_at_once_without_requests_and_after_the_last_one_ends() -> None:
    async def run() -> None:
        lv = version("a", 1)
        await asyncio.wait_for(lv.wait_idle(), 5)  # nothing in flight
        assert lv.drained is None  # and no waiter was made for it
        Registry.acquire(lv)
        Registry.acquire(lv)
        waiting = asyncio.ensure_future(lv.wait_idle())
        await turns()
        Registry.release(lv)
        await turns()
        assert not waiting.done()  # one still in flight
        Registry.release(lv)
        await asyncio.wait_for(waiting, 5)
        assert lv.in_flight == 0 and lv.drained is None

    asyncio.run(run())


def test_wait_idle_waits_on_when_a_request_comes_before_it_wakes() -> None:
    async def run() -> None:
        lv = version("a", 1)
        Registry.acquire(lv)
        waiting = asyncio.ensure_future(lv.wait_idle())
        await turns()
        Registry.release(lv)
        Registry.acquire(lv)  # taken again before the waiter ran: it is not idle
        await turns()
        assert not waiting.done()
        Registry.release(lv)
        await asyncio.wait_for(waiting, 5)

    asyncio.run(run())


def test_an_ensembles_description_follows_the_set_it_serves() -> None:
    a1, a2, b1 = version("a", 1), version("a", 2), version("b", 1)
    graph = build_graph(parse_config_text(CHAIN), {"a": a1.config, "b": b1.config}, {"a": [1, 2], "b": [1]})
    state = EnsembleState(graph=graph, steps={0: a1, 1: b1})
    assert state.describe() == "a:1,b:1"
    assert state.describe() == "a:1,b:1"  # from what it kept
    state.steps = {0: a2, 1: b1}  # a switch replaces the set
    assert state.describe() == "a:2,b:1"


def test_find_takes_the_newest_served_version_and_refuses_an_ensemble_that_is_not_ready() -> None:
    registry = Registry()
    rec = registry.record("a")
    rec.versions = {1: version("a", 1), 2: version("a", 2)}
    rec.served = (1, 2)
    assert registry.find("a", "") is rec.versions[2]
    assert registry.find("a", "1") is rec.versions[1]
    chain = ModelRecord("chain", versions={1: version("chain", 1, CHAIN)}, served=(1,))
    graph = build_graph(parse_config_text(CHAIN), {"a": rec.versions[2].config, "b": version("b", 1).config},
                        {"a": [1, 2], "b": [1]})
    chain.ensemble = EnsembleState(graph=graph, steps={}, reason="step 'b' has no version")
    registry.records["chain"] = chain
    with pytest.raises(InferenceError) as refused:
        registry.find("chain", "")
    assert refused.value.code == ErrorCode.UNAVAILABLE
    assert "is not ready: step 'b' has no version" in refused.value.message
    chain.ensemble.steps, chain.ensemble.reason = {0: rec.versions[2], 1: version("b", 1)}, ""
    assert registry.find("chain", "") is chain.versions[1]


@pytest.mark.parametrize("batch", [0, 1, 3])
def test_record_alone_counts_what_a_request_and_its_execution_count(batch: int) -> None:
    compute = ComputeTimes(input_ns=7, infer_ns=11, output_ns=13)
    apart, together = ModelStats(), ModelStats()
    for queue_ns, now_ms in ((5, 100), (9, 90)):  # a clock that went back: the last inference stays the latest
        apart.record_request(batch, queue_ns, compute)
        apart.record_execution(max(1, batch), compute, now_ms)
        together.record_alone(batch, queue_ns, compute, now_ms)
    assert together == apart
    assert together.last_inference_ms == 100 and together.queue.count == 2 and together.queue.ns == 14


class HeldQueuingInstance:
    """A stand-in for a python model's instance (the backend seam): `execute_then` runs each request on a
    thread of its own once `release` is set, and answers there."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed = False

    def queues_calls(self) -> bool:
        return True

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        raise AssertionError("not called: calls go through execute_then")

    async def execute_queued(self, requests: Sequence[BackendRequest], ran: RunTimes) -> list[BackendResult]:
        raise AssertionError("not called: calls go through execute_then")

    def execute_then(self, request: BackendRequest, ran: RunTimes, then: Callable[[BackendResult], None]) -> None:
        def run() -> None:
            self.release.wait(30)
            then({"Y": request.inputs["X"] + 1})

        threading.Thread(target=run, daemon=True).start()

    async def close(self) -> None:
        self.closed = True


def test_closing_a_scheduler_waits_for_the_calls_its_instance_threads_still_hold() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        instance = HeldQueuingInstance()
        scheduler = Scheduler("a", [instance], BatchPolicy(False, 0, 0.0), ModelStats())
        scheduler.start()
        answered: list[asyncio.Future[None]] = []
        for _ in range(2):
            done: asyncio.Future[None] = loop.create_future()

            def then(result: BackendResult, settle: Callable[[], None], done: asyncio.Future[None] = done) -> None:
                def settled() -> None:
                    settle()
                    done.set_result(None)

                loop.call_soon_threadsafe(settled)

            scheduler.submit_then(BackendRequest({"X": np.zeros(4, np.float32)}, ("Y",)), then)
            answered.append(done)
        closing = asyncio.ensure_future(scheduler.close())
        await turns()
        assert not closing.done() and not instance.closed  # two calls still out
        instance.release.set()
        await asyncio.wait_for(asyncio.gather(*answered), 30)
        await asyncio.wait_for(closing, 30)
        assert instance.closed

    asyncio.run(run())
