"""`Scheduler.submit_then`: a request for python instances that queue calls, run without a task or a future. The
instance's thread hands the result to `then`; the statistics and the request's place in the queue wait for the
`settle` it is given, called on the loop (the real backend and its threads; the scheduler over them)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from ensemble_runtime.backends.python.instance import ModelExitError
from ensemble_runtime.batching import BatchPolicy
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.stats import ModelStats

from .conftest import Harness, Run
from .test_queued_calls import request, values


@dataclass
class Outcome:
    result: BackendResult
    thread: str  # the thread `then` was called on
    settle: Callable[[], None]

    def outputs(self) -> dict[str, Tensor]:
        assert not isinstance(self.result, BaseException), self.result
        return self.result


def submit_then(sched: Scheduler, req: BackendRequest) -> asyncio.Future[Outcome]:
    """What `then` gets, handed back to the loop (not settled: the test settles)."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Outcome] = loop.create_future()

    def then(result: BackendResult, settle: Callable[[], None]) -> None:
        got = Outcome(result, threading.current_thread().name, settle)
        loop.call_soon_threadsafe(outcome.set_result, got)

    sched.submit_then(req, then)
    return outcome


async def settled(sched: Scheduler, req: BackendRequest) -> Outcome:
    """What `then` got, once settled."""
    outcome = await submit_then(sched, req)
    outcome.settle()
    return outcome


def flagged(flag: str) -> BackendRequest:
    """A request for `queued` with X 1 and the parameter `flag` set."""
    return BackendRequest({"X": np.array([1], dtype=np.int32)}, (), parameters={flag: True})


def patch_queued(repo: Path, at: str, inserted: str, appended: str = "") -> None:
    """Insert `inserted` before the (first) line `at` of the `queued` model's source; append `appended`."""
    model = repo / "queued" / "1" / "model.py"
    source = model.read_text()
    assert at in source
    model.write_text(source.replace(at, inserted + at, 1) + appended)


async def started(h: Harness, name: str, policy: BatchPolicy | None = None) -> tuple[Scheduler, ModelStats]:
    stats = ModelStats()
    sched = Scheduler(name, await h.load(name), policy or BatchPolicy(), stats)
    sched.start()
    return sched, stats


def test_instances_that_queue_calls_or_run_inline_take_them(run: Run) -> None:
    async def body(h: Harness) -> None:
        takes = {}
        for name in ("queued", "async_add", "inline"):
            sched, _ = await started(h, name)
            takes[name] = sched.takes_then()
            if not takes[name]:
                with pytest.raises(InferenceError, match="no instance takes a request without a task"):
                    sched.submit_then(request(1), lambda result, settle: None)
            await sched.close()
        assert takes == {"queued": True, "async_add": False, "inline": True}

    run(body)


def test_an_inline_model_runs_on_the_loop_before_submit_then_returns(run: Run) -> None:
    """EXECUTE_INLINE: the request runs in the call that submitted it, on the loop's thread, and is counted
    once settled, as a queued one is."""

    async def body(h: Harness) -> None:
        sched, stats = await started(h, "inline")
        got: list[Outcome] = []
        sched.submit_then(request(1), lambda result, settle: got.append(
            Outcome(result, threading.current_thread().name, settle)))
        (outcome,) = got  # already there: nothing was handed to another thread
        assert outcome.thread == threading.current_thread().name
        assert outcome.outputs()["THREAD"][0] == threading.current_thread().name.encode()
        assert stats.execution_count == 0
        outcome.settle()
        assert stats.execution_count == stats.inference_count == 1 and stats.compute_infer.ns > 0
        await sched.close()

    run(body)


def test_the_result_comes_on_the_instance_thread_and_counts_once_settled(run: Run, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        sched, stats = await started(h, "queued")
        first = await submit_then(sched, request(5))
        assert values(first.outputs()) == (5, 1, 1)
        assert first.thread.startswith("py-") and first.thread != threading.current_thread().name
        assert stats.execution_count == 0 and stats.queue.count == 0  # nothing counted before `settle`
        first.settle()
        assert stats.execution_count == stats.inference_count == 1
        assert stats.queue.count == stats.compute_infer.count == 1 and stats.compute_infer.ns > 0

        # Unloading waits for the request's place in the queue, freed by `settle`, not for the result.
        second = await submit_then(sched, request(6))
        closing = asyncio.ensure_future(sched.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        with pytest.raises(InferenceError, match="unloading"):
            sched.submit_then(request(7), lambda result, settle: None)
        second.settle()
        await closing
        assert stats.execution_count == 2

    run(body)


def test_calls_with_and_without_a_future_share_the_queue_in_order(run: Run, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        sched, stats = await started(h, "queued")
        gate = tmp_path / "open"
        held = submit_then(sched, request(0, gate))
        awaited: list[asyncio.Future[dict[str, Tensor]]] = []
        then = []
        for x in (1, 3):
            awaited.append(asyncio.ensure_future(sched.submit(request(x))))
            await asyncio.sleep(0)  # the task's first step queues its call
            then.append(submit_then(sched, request(x + 1)))
        await asyncio.sleep(0.05)
        assert not held.done() and not any(a.done() for a in awaited)  # all behind the held one
        gate.touch()
        outcomes = [await held, *[await t for t in then]]
        results = [values(o.outputs()) for o in outcomes] + [values(await a) for a in awaited]
        assert sorted(results) == [(x, x + 1, 1) for x in range(5)]  # in order of the calls, one at a time
        for outcome in outcomes:
            outcome.settle()
        assert stats.execution_count == 5
        await sched.close()

    run(body)


def test_a_full_queue_refuses_before_anything_runs(run: Run, tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        sched, stats = await started(h, "queued", BatchPolicy(max_queue_size=1))
        gate = tmp_path / "open"
        calls = [submit_then(sched, request(x, gate)) for x in range(2)]  # one runs, one waits
        with pytest.raises(InferenceError, match="exceeds maximum queue size 1") as refused:
            sched.submit_then(request(9), lambda result, settle: None)
        assert refused.value.code == ErrorCode.UNAVAILABLE
        gate.touch()
        for call in calls:
            (await call).settle()
        again = await submit_then(sched, request(7))  # room again once settled
        assert values(again.outputs())[0] == 7
        again.settle()
        assert stats.execution_count == 3
        await sched.close()

    run(body)


def test_failures_come_to_then_and_the_thread_goes_on(run: Run) -> None:
    """A model that raises, returns the wrong thing, or answers with its own error: `then` gets the error (the
    model's own error response counts as a run once settled, the others do not)."""

    async def body(h: Harness) -> None:
        sched, stats = await started(h, "errors")

        def req(mode: str) -> BackendRequest:
            return BackendRequest({"X": np.array([1], dtype=np.float32)}, (), parameters={"mode": mode})

        outcomes = {mode: await submit_then(sched, req(mode)) for mode in ("raise", "none", "error_response", "ok")}
        for outcome in outcomes.values():
            outcome.settle()
        failed = outcomes["raise"].result
        assert isinstance(failed, InferenceError) and failed.code == ErrorCode.INTERNAL
        assert "cannot handle this batch" in failed.message
        assert isinstance(outcomes["none"].result, InferenceError) and "returned NoneType" in str(
            outcomes["none"].result
        )
        answered = outcomes["error_response"].result
        assert isinstance(answered, InferenceError) and answered.code == ErrorCode.INVALID_ARGUMENT
        assert int(outcomes["ok"].outputs()["Y"][0]) == 2
        assert stats.execution_count == 2  # the model's error response and the success
        await sched.close()

    run(body)


def test_a_model_that_exits_is_contained_on_its_thread(run: Run, repo: Path) -> None:
    patch_queued(repo, "        with self.lock:\n            self.active += 1\n",
                 "        if json.loads(requests[0].parameters() or '{}').get('exit'):\n"
                 "            raise SystemExit(3)\n")

    async def body(h: Harness) -> None:
        sched, _ = await started(h, "queued")
        exited = await settled(sched, flagged("exit"))
        assert isinstance(exited.result, ModelExitError) and "SystemExit(3)" in exited.result.message
        assert values((await settled(sched, request(8))).outputs())[0] == 8  # the instance's thread still serves
        await sched.close()

    run(body)


def test_a_response_that_cannot_be_read_fails_its_request_only(run: Run, repo: Path) -> None:
    """What execute returned breaks while it is turned into outputs (on the instance's thread): `then` still
    gets an error for that request, and the thread goes on."""
    patch_queued(repo, "            return None if self.decoupled else responses\n",
                 "            if json.loads(requests[0].parameters() or '{}').get('broken'):\n"
                 "                return [Unreadable(responses[0].output_tensors())]\n",
                 "\n\nclass Unreadable(pb_utils.InferenceResponse):\n"
                 "    def output_tensors(self):\n"
                 "        raise RuntimeError('cannot read these outputs')\n")

    async def body(h: Harness) -> None:
        sched, stats = await started(h, "queued")
        broken = await settled(sched, flagged("broken"))
        assert isinstance(broken.result, RuntimeError) and "cannot read these outputs" in str(broken.result)
        assert values((await settled(sched, request(3))).outputs())[0] == 3  # the thread goes on
        assert stats.execution_count == 1  # only the request that ran to an answer
        await sched.close()

    run(body)
