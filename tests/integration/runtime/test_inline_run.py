"""A request `DataPlane.infer_then` takes for a model that runs inline on the loop (a fast ONNX model) is run,
counted and answered before `infer_then` returns (`Scheduler.run_inline`): the answer comes on the loop's own
thread, the statistics hold the request and its execution at once, and nothing is left in flight or holding its
version. A version that stopped taking requests refuses it, counted as a failure, as a request handed on is. The
data plane is the runtime's own (`build_dataplane`) on a real uvloop, with the `add_sub` ONNX model of the
benchmarks."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import uvloop
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.server import build_dataplane, default_backends
from ensemble_runtime.settings import parse_settings

from bench.models import ONNX_MODEL, build_onnx_repository

WARM_UP = 2_000  # requests at most until the model's executions are timed fast enough to run inline


def _request(i: int, batch: int = 1) -> InferRequest:
    inputs = {"INPUT0": np.full((batch, 16), i, np.float32), "INPUT1": np.ones((batch, 16), np.float32)}
    return InferRequest(model_name=ONNX_MODEL, inputs=inputs, id=f"r{i}")


def _taken_at_once(dataplane: DataPlane, request: InferRequest) -> list[tuple[InferResponse | Exception, int]]:
    """`infer_then` of `request`: each answer with the thread it came on, as they were when it returned."""
    answers: list[tuple[InferResponse | Exception, int]] = []
    assert dataplane.infer_then(request, None, lambda outcome: answers.append((outcome, threading.get_ident())))
    return list(answers)


async def _runs_inline(dataplane: DataPlane) -> Scheduler:
    """The model's scheduler, once its executions were timed short enough to run on the loop."""
    (lv,) = dataplane.statistics(ONNX_MODEL, "1")
    scheduler = lv.scheduler
    assert isinstance(scheduler, Scheduler)
    for i in range(WARM_UP):
        if scheduler.takes_then():
            return scheduler
        await dataplane.infer(_request(i))
    pytest.fail(f"{ONNX_MODEL} did not run inline after {WARM_UP} requests")


def test_an_inline_request_is_counted_and_answered_before_infer_then_returns(tmp_path: Path) -> None:
    build_onnx_repository(tmp_path)

    async def scenario() -> None:
        dataplane = build_dataplane(parse_settings([f"--model-repository={tmp_path}"]), default_backends())
        await dataplane.manager.load([ONNX_MODEL])
        try:
            await _runs_inline(dataplane)
            (lv,) = dataplane.statistics(ONNX_MODEL, "1")
            stats = lv.stats
            before = (stats.success.count, stats.execution_count, stats.inference_count, stats.queue.count,
                      stats.compute_infer.count, stats.batches[2].compute_infer.count if 2 in stats.batches else 0)
            for i, batch in ((1, 1), (2, 2), (3, 1)):
                answers = _taken_at_once(dataplane, _request(i, batch))
                assert [thread for _, thread in answers] == [threading.get_ident()]  # on the loop, already
                response = answers[0][0]
                assert isinstance(response, InferResponse), response
                assert (response.model_name, response.model_version, response.id) == (ONNX_MODEL, "1", f"r{i}")
                assert response.outputs["OUTPUT0"].tolist() == [[i + 1.0] * 16] * batch
                assert response.outputs["OUTPUT1"].tolist() == [[i - 1.0] * 16] * batch
                assert (dataplane.in_flight, lv.in_flight) == (0, 0)
            after = (stats.success.count, stats.execution_count, stats.inference_count, stats.queue.count,
                     stats.compute_infer.count, stats.batches[2].compute_infer.count)
            assert [b - a for a, b in zip(before, after, strict=True)] == [3, 3, 4, 3, 3, 1]
            assert stats.success.ns > 0 and stats.compute_infer.ns > 0
        finally:
            await dataplane.manager.unload(ONNX_MODEL)

    uvloop.run(scenario())


def test_a_version_that_stopped_taking_requests_refuses_an_inline_one_as_a_failure(tmp_path: Path) -> None:
    build_onnx_repository(tmp_path)

    async def scenario() -> None:
        dataplane = build_dataplane(parse_settings([f"--model-repository={tmp_path}"]), default_backends())
        await dataplane.manager.load([ONNX_MODEL])
        await _runs_inline(dataplane)
        (lv,) = dataplane.statistics(ONNX_MODEL, "1")
        failures, successes = lv.stats.fail.count, lv.stats.success.count
        await dataplane.registry.close()  # as at the server's exit: every loaded version's scheduler, still served
        with pytest.raises(InferenceError, match="is unloading"):
            dataplane.infer_then(_request(1), None, lambda outcome: pytest.fail(f"answered: {outcome!r}"))
        assert (lv.stats.fail.count, lv.stats.success.count) == (failures + 1, successes)
        assert (dataplane.in_flight, lv.in_flight) == (0, 0)

    uvloop.run(scenario())
