"""A request `DataPlane.infer_then` hands to a python model's instance thread is answered from that thread, and its
end (statistics, in flight, its version's hold) reaches the event loop after the answer left, so the wake-up of
the loop does not delay the answer. Whatever the loop reads after the answer must still count it: here the loop
itself waits for the answer (blocking, so the wake-up the thread posted cannot run) and then reads the statistics
in the same turn. The data plane is the runtime's own (`build_dataplane`), on a real uvloop, with the `add_one`
python model of the benchmarks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import uvloop
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.server import build_dataplane, default_backends
from ensemble_runtime.settings import parse_settings

from bench.models import build_add_one

MODEL = "add_one_0"
WAIT = 60.0  # seconds: a loaded 2-core machine


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[Path]:
    build_add_one(tmp_path, MODEL)
    yield tmp_path


def _request(i: int) -> InferRequest:
    return InferRequest(model_name=MODEL, inputs={"X": np.full(16, i, np.float32)}, id=f"r{i}")


async def _answered_then_read(dataplane: DataPlane, i: int) -> tuple[InferResponse | Exception, int, int, int]:
    """In one turn of the loop: hand request `i` over, wait for its answer on this thread, read the statistics."""
    answered = threading.Event()
    outcome: list[InferResponse | Exception] = []

    def answer(result: InferResponse | Exception) -> None:  # on the instance's thread
        outcome.append(result)
        answered.set()

    assert dataplane.infer_then(_request(i), None, answer)
    assert answered.wait(WAIT)  # the loop blocked: nothing it was handed since runs before the reads below
    (lv,) = dataplane.statistics(MODEL, "1")
    return outcome[0], lv.stats.success.count, dataplane.in_flight, lv.in_flight


def test_an_answer_from_a_model_thread_is_counted_before_the_loop_reads(repository: Path) -> None:
    async def scenario() -> None:
        dataplane = build_dataplane(parse_settings([f"--model-repository={repository}"]), default_backends())
        await dataplane.manager.load([MODEL])
        try:
            for i in range(1, 6):
                response, successes, in_flight, holds = await _answered_then_read(dataplane, i)
                assert isinstance(response, InferResponse), response
                assert response.outputs["Y"].tolist() == [i + 1.0] * 16
                assert (successes, in_flight, holds) == (i, 0, 0)
                await asyncio.sleep(0)  # the wake-up the thread posted finds nothing left to count
                (lv,) = dataplane.statistics(MODEL, "1")
                assert lv.stats.success.count == i
        finally:
            await dataplane.manager.unload(MODEL)

    uvloop.run(scenario())
