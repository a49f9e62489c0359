"""A request that a model's thread answers while nothing else is in flight is counted on the event loop right
after, without waiting for the next request or the settlements' timer: the thread that answered wakes the loop
(`DataPlane._settle_alone`). At one request in flight that keeps the count off the next request's time. Here the
timer is an hour and no other request comes, so only that wake-up can end the request on the loop: its version's
hold and the data plane's count of requests in flight must drop back to 0, for a python model (`add_one_0`) and for
a chain of two (`chain2`, carried from step to step by the models' threads). The data plane is the runtime's own
(`build_dataplane`), on a real uvloop, with the benchmarks' python models."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import uvloop
from ensemble_runtime.backends.handoff import Deferred
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.server import build_dataplane, default_backends
from ensemble_runtime.settings import parse_settings

from bench.models import build_chain_repository

WAIT = 60.0  # seconds: a loaded 2-core machine
HOUR = 3600.0  # the settlements' timer: never, within the test
INPUT = {"add_one_0": "X", "chain2": "IN"}
OUTPUT = {"add_one_0": ("Y", 1.0), "chain2": ("OUT", 2.0)}


async def _ended_alone(dataplane: DataPlane, model: str, value: float) -> None:
    """One request, alone: answered right, then ended on the loop (counted, its hold released) with no other
    request and no timer."""
    answered = threading.Event()
    outcome: list[InferResponse | Exception] = []

    def answer(result: InferResponse | Exception) -> None:
        outcome.append(result)
        answered.set()

    request = InferRequest(model_name=model, inputs={INPUT[model]: np.full(16, value, np.float32)}, id="alone")
    assert dataplane.infer_then(request, None, answer)
    deadline = time.monotonic() + WAIT
    while not answered.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert answered.is_set(), "not answered"
    (response,) = outcome
    assert isinstance(response, InferResponse), response
    name, added = OUTPUT[model]
    assert response.outputs[name].tolist() == [value + added] * 16
    while dataplane.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert dataplane.in_flight == 0, "the lone request was not ended on the loop: nothing woke it"
    holds = {lv.model: lv.in_flight for lv in dataplane.registry.loaded_versions()}
    assert set(holds.values()) == {0}, holds


@pytest.mark.parametrize("model", ["add_one_0", "chain2"])
def test_a_lone_request_is_ended_on_the_loop_without_the_next(tmp_path: Path, model: str) -> None:
    build_chain_repository(tmp_path, [2])

    async def scenario() -> None:
        dataplane = build_dataplane(parse_settings([f"--model-repository={tmp_path}"]), default_backends())
        dataplane.settlements = Deferred(within=HOUR, at_most=HOUR)
        await dataplane.manager.load([model])
        try:
            for value in (1.0, 2.0, 3.0):
                await _ended_alone(dataplane, model, value)
        finally:
            await dataplane.manager.unload(model)

    uvloop.run(scenario())
