"""`stream_inference.model_items`: a decoupled model's responses as it sends them, while its call still runs; a
call the scheduler refuses raises. The scheduler is a stand-in at its seam (`submit`)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from ensemble_runtime.errors import InferenceError, unavailable
from ensemble_runtime.inference import BackendRequest
from ensemble_runtime.registry import LoadedVersion
from ensemble_runtime.responses import StreamItem
from ensemble_runtime.stats import ComputeTimes
from ensemble_runtime.stream_inference import model_items


@dataclass
class Scheduler:
    """Sends one response at once, then waits for `release` before the final flag and returning (as a model
    sending from `execute`); or raises `refusal` before anything runs."""

    release: asyncio.Event
    refusal: BaseException | None = None
    returned: bool = False

    async def submit(self, request: BackendRequest, times: ComputeTimes | None = None) -> dict[str, Any]:
        if self.refusal is not None:
            raise self.refusal
        assert request.responses is not None
        request.responses.put(StreamItem(outputs={"Y": np.array([1])}))
        await self.release.wait()
        request.responses.put(StreamItem(outputs={"Y": np.array([2])}, final=True))
        self.returned = True
        return {}


def _version(scheduler: Scheduler) -> LoadedVersion:
    return cast(LoadedVersion, SimpleNamespace(scheduler=scheduler, model="m", version=1))


def test_a_response_is_read_while_the_call_runs() -> None:
    async def run() -> None:
        scheduler = Scheduler(asyncio.Event())
        items = model_items(_version(scheduler), BackendRequest({}, ()))
        async with contextlib.aclosing(items):
            first = await asyncio.wait_for(anext(items), 30)
            assert first.outputs is not None and first.outputs["Y"].tolist() == [1]
            assert not scheduler.returned  # the call is still running
            scheduler.release.set()
            rest = [item async for item in items]
        assert [item.outputs["Y"].tolist() for item in rest if item.outputs is not None] == [[2]]
        assert rest[-1].final and scheduler.returned

    asyncio.run(run())


@pytest.mark.parametrize(("refusal", "message"), [
    (unavailable("model 'm' is unloading"), "model 'm' is unloading"),
    (RuntimeError("broken"), "model call failed: RuntimeError: broken"),
])
def test_a_refused_call_raises(refusal: BaseException, message: str) -> None:
    async def run() -> None:
        items = model_items(_version(Scheduler(asyncio.Event(), refusal)), BackendRequest({}, ()))
        with pytest.raises(InferenceError) as raised:
            async with contextlib.aclosing(items):
                await asyncio.wait_for(anext(items), 30)
        assert raised.value.message == message

    asyncio.run(run())
