"""A chain ensemble (`chain2`: add_one_0 -> add_one_1) that `DataPlane.infer_then` takes is carried from step to
step by the models' own threads: the first step's thread hands the second step to its model and the last one
answers, without the event loop between them. Each step's end and the request's own are counted on the loop before
whatever it reads next. Here the loop itself blocks until the answer comes, from its next callback after the one
that handed the request over (so nothing posted to it after that runs meanwhile), and reads the statistics in that
same turn. A step whose model takes requests only on the loop (one that
runs `execute` inline) sends the run back to the loop, and a step's failure fails the request as before. The data
plane is the runtime's own (`build_dataplane`) on a real uvloop, with the benchmarks' python models."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import uvloop
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.server import build_dataplane, default_backends
from ensemble_runtime.settings import parse_settings

from bench.models import INLINE, build_chain_repository
from tests.support.blocked_loop import answered_while_blocked

CHAIN, FIRST, SECOND = "chain2", "add_one_0", "add_one_1"
WAIT = 60.0  # seconds: a loaded 2-core machine
FAILS_ON_NEGATIVE = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0] < 0:
                raise ValueError("a negative input")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", x + 1)]))
        return responses
'''


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[Path]:
    build_chain_repository(tmp_path, [2])
    yield tmp_path


def _request(value: float) -> InferRequest:
    return InferRequest(model_name=CHAIN, inputs={"IN": np.full(16, value, np.float32)}, id="r")


async def _served(repository: Path) -> DataPlane:
    dataplane = build_dataplane(parse_settings([f"--model-repository={repository}"]), default_backends())
    await dataplane.manager.load([CHAIN])
    return dataplane


async def _answered_blocking(dataplane: DataPlane, value: float) -> tuple[InferResponse | Exception, str]:
    """The answer to `_request(value)`, given while the loop's thread is blocked, and the thread that gave it."""
    return await answered_while_blocked(dataplane, _request(value), WAIT)


def _counts(dataplane: DataPlane, model: str) -> tuple[int, int, int]:
    """(successes, failures, requests holding the version) of `model` version 1."""
    (lv,) = dataplane.statistics(model, "1")
    return lv.stats.success.count, lv.stats.fail.count, lv.in_flight


def test_the_model_threads_carry_a_chain_and_the_loop_counts_it_before_it_reads(repository: Path) -> None:
    async def scenario() -> None:
        dataplane = await _served(repository)
        try:
            for i in range(1, 5):
                response, thread = await _answered_blocking(dataplane, float(i))
                assert isinstance(response, InferResponse), response
                assert response.outputs["OUT"].tolist() == [i + 2.0] * 16
                assert thread.startswith(f"py-{SECOND}"), thread  # the last step's instance answered
                assert [_counts(dataplane, m) for m in (CHAIN, FIRST, SECOND)] == [(i, 0, 0)] * 3
                assert dataplane.in_flight == 0
            (chain,) = dataplane.statistics(CHAIN, "1")
            (first,) = dataplane.statistics(FIRST, "1")
            (second,) = dataplane.statistics(SECOND, "1")
            assert chain.stats.execution_count == 4
            steps_infer = first.stats.compute_infer.ns + second.stats.compute_infer.ns
            assert chain.stats.compute_infer.ns == steps_infer  # the steps' compute, summed into the request's
        finally:
            await dataplane.manager.unload(CHAIN)

    uvloop.run(scenario())


def test_a_step_whose_model_runs_on_the_loop_takes_the_run_back_there(repository: Path) -> None:
    config = repository / SECOND / "config.pbtxt"
    config.write_text(config.read_text() + INLINE)

    async def scenario() -> None:
        dataplane = await _served(repository)
        loop = asyncio.get_running_loop()
        try:
            for i in range(3):
                answered: asyncio.Future[tuple[InferResponse | Exception, str]] = loop.create_future()

                def answer(
                    result: InferResponse | Exception,
                    answered: asyncio.Future[tuple[InferResponse | Exception, str]] = answered,
                ) -> None:
                    name = threading.current_thread().name
                    loop.call_soon_threadsafe(answered.set_result, (result, name))

                assert dataplane.infer_then(_request(float(i)), None, answer)
                response, thread = await asyncio.wait_for(answered, WAIT)
                assert isinstance(response, InferResponse), response
                assert response.outputs["OUT"].tolist() == [i + 2.0] * 16
                assert thread == threading.current_thread().name  # the second step ran, and answered, on the loop
                assert [_counts(dataplane, m) for m in (CHAIN, FIRST, SECOND)] == [(i + 1, 0, 0)] * 3
        finally:
            await dataplane.manager.unload(CHAIN)

    uvloop.run(scenario())


def test_a_failing_step_of_a_carried_chain_fails_the_request_and_is_counted(repository: Path) -> None:
    (repository / SECOND / "1" / "model.py").write_text(FAILS_ON_NEGATIVE)

    async def scenario() -> None:
        dataplane = await _served(repository)
        try:
            failed, thread = await _answered_blocking(dataplane, -5.0)  # add_one_0 makes it -4: add_one_1 raises
            assert isinstance(failed, InferenceError), failed
            assert failed.code is ErrorCode.INTERNAL
            assert f"ensemble '{CHAIN}' step 1" in failed.message and "a negative input" in failed.message
            assert thread.startswith(f"py-{SECOND}"), thread
            assert [_counts(dataplane, m) for m in (CHAIN, FIRST, SECOND)] == [(0, 1, 0), (1, 0, 0), (0, 1, 0)]
            response, _ = await _answered_blocking(dataplane, 1.0)  # the next one is answered as before
            assert isinstance(response, InferResponse), response
            assert response.outputs["OUT"].tolist() == [3.0] * 16
            assert _counts(dataplane, CHAIN) == (1, 1, 0)
            assert dataplane.in_flight == 0
        finally:
            await dataplane.manager.unload(CHAIN)

    uvloop.run(scenario())


def test_the_queue_places_carried_steps_held_are_free_for_the_next(repository: Path) -> None:
    """Each step model with a queue of one place (one instance: two requests at most). Steps handed on by a model's
    thread and counted on the loop later must not fill them: eight chain requests in a row, each answered and the
    next admitted in the same turn of the loop, none refused."""
    for model in (FIRST, SECOND):
        config = repository / model / "config.pbtxt"
        config.write_text(config.read_text() + "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n")

    async def scenario() -> list[float]:
        dataplane = await _served(repository)
        try:
            firsts = []
            for i in range(8):
                outcome, _ = await _answered_blocking(dataplane, float(i))
                assert isinstance(outcome, InferResponse), outcome
                firsts.append(float(outcome.outputs["OUT"][0]))
            return firsts
        finally:
            await dataplane.manager.unload(CHAIN)

    assert uvloop.run(scenario()) == [i + 2.0 for i in range(8)]
