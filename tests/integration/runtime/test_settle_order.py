"""A request `DataPlane.infer_then` hands to a python model's instance thread is answered from that thread, and its
end (statistics, in flight, its version's hold) reaches the event loop after the answer left, so the wake-up of
the loop does not delay the answer. Whatever the loop reads after the answer must still count it: here the loop
itself waits for the answer, in its next callback after the hand-over's (blocking, so the wake-up the thread posted
cannot run), and then reads the statistics in the same turn; and the places in the model's queue those answered
requests held are free for the next one admitted in that turn. The data plane is the runtime's own
(`build_dataplane`), on a real uvloop, with the `add_one` python model of the benchmarks."""

from __future__ import annotations

import asyncio
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
from tests.support.blocked_loop import answered_while_blocked

MODEL = "add_one_0"
WAIT = 60.0  # seconds: a loaded 2-core machine


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[Path]:
    build_add_one(tmp_path, MODEL)
    yield tmp_path


def _request(i: int) -> InferRequest:
    return InferRequest(model_name=MODEL, inputs={"X": np.full(16, i, np.float32)}, id=f"r{i}")


async def _answered(dataplane: DataPlane, i: int) -> InferResponse | Exception:
    """The answer to request `i`, given while the loop's thread is blocked."""
    outcome, _ = await answered_while_blocked(dataplane, _request(i), WAIT)
    return outcome


async def _answered_then_read(dataplane: DataPlane, i: int) -> tuple[InferResponse | Exception, int, int, int]:
    """In one turn of the loop, the one after the hand-over's: request `i` answered, then the statistics read."""
    outcome = await _answered(dataplane, i)
    (lv,) = dataplane.statistics(MODEL, "1")
    return outcome, lv.stats.success.count, dataplane.in_flight, lv.in_flight


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


def test_the_queue_places_answered_requests_held_are_free_for_the_next(repository: Path) -> None:
    """With a queue of one place (and one instance: two requests at most), requests answered by the model's thread
    and not yet counted on the loop must not fill it: each is answered, then the next admitted in the same turn of
    the loop (no timer or wake-up can count them in between). Eight in a row, none refused."""
    config = repository / MODEL / "config.pbtxt"
    config.write_text(config.read_text() + "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n")

    async def scenario() -> list[float]:
        dataplane = build_dataplane(parse_settings([f"--model-repository={repository}"]), default_backends())
        await dataplane.manager.load([MODEL])
        try:
            firsts: list[float] = []
            for i in range(8):
                outcome = await _answered(dataplane, i)
                assert isinstance(outcome, InferResponse), outcome
                firsts.append(float(outcome.outputs["Y"][0]))
            return firsts
        finally:
            await dataplane.manager.unload(MODEL)

    assert uvloop.run(scenario()) == [i + 1.0 for i in range(8)]
