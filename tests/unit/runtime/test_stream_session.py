"""`StreamSession` at its seam with the data plane (a stand-in whose `infer_stream` yields numbered responses):
how the native core's `drive` and grpcio's `run` end when the client reads nothing more or goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pytest
from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol.grpc_stream import StreamSession
from ensemble_runtime.responses import StreamResponse

pytestmark = pytest.mark.asyncio
WAIT = 30.0  # a loaded machine's margin: the session must not hang, not be fast


@dataclass
class Plane:
    """The data plane's part a session uses: `count` responses per request, then the final flag."""

    count: int
    shared_memory: object = None
    ended: list[str] = field(default_factory=list)  # requests whose responses were all produced or given up

    async def infer_stream(self, request: InferRequest, declared: Any) -> AsyncGenerator[StreamResponse, None]:
        try:
            for index in range(self.count):
                yield StreamResponse(InferResponse("m", "1", {"OUT": np.array([index])}, id=request.id))
                await asyncio.sleep(0)
            yield StreamResponse(final=True)
        finally:
            self.ended.append(request.id)


class Codec:
    """Requests are their ids; a message is (id, the response's number or None for the final flag)."""

    def size(self, request: str) -> int:
        return 0

    def take_empty_final(self, request: str) -> bool:
        return True

    def decode(self, request: str, shm: Any) -> tuple[InferRequest, dict[str, str]]:
        return InferRequest("m", "", {}, [], request), {}

    async def response(self, request: str, response: InferResponse, final: bool, shm: Any, refs: Any) -> object:
        return request, int(response.outputs["OUT"][0])

    def bare(self, request: str, final: bool) -> object:
        return request, None

    def error(self, request: str, message: str, final: bool) -> object:
        return request, message


async def _requests(ids: list[str]) -> AsyncIterator[str]:
    for request_id in ids:
        yield request_id


def _session(plane: Plane, limit: int = 4) -> StreamSession[str, object]:
    return StreamSession(cast(DataPlane, plane), Codec(), limit)


async def test_drive_writes_every_message_from_each_requests_task() -> None:
    sent: list[object] = []

    async def send(message: object) -> bool:
        sent.append(message)
        return True

    await asyncio.wait_for(_session(Plane(count=3)).drive(_requests(["a", "b"]), send), WAIT)
    for request_id in ("a", "b"):
        assert [m for m in sent if m[0] == request_id] == [(request_id, 0), (request_id, 1), (request_id, 2),  # type: ignore[index]
                                                           (request_id, None)]


async def test_drive_ends_when_the_client_is_gone() -> None:
    plane = Plane(count=1000)
    sent: list[object] = []

    async def send(message: object) -> bool:
        sent.append(message)
        return len(sent) < 5  # the fifth finds the stream ended

    await asyncio.wait_for(_session(plane).drive(_requests(["a", "b", "c"]), send), WAIT)
    assert len(sent) <= 4 + 3  # after the stream ended, each request's task tries once at most
    assert sorted(plane.ended) == ["a", "b", "c"]  # every request's responses given up, none left running


async def test_run_closed_with_its_queue_full_ends() -> None:
    """grpcio's generator, closed by a client that went away while the session's queue was full, ends (its
    driver cancelled, not left waiting to put the end marker)."""
    plane = Plane(count=1000)
    messages = _session(plane, limit=2).run(_requests(["a", "b"]))
    assert await anext(messages) == ("a", 0)
    for _ in range(100):  # let the tasks fill the queue
        await asyncio.sleep(0)
    await asyncio.wait_for(messages.aclose(), WAIT)
    assert sorted(plane.ended) == ["a", "b"]
