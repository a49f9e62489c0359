"""The same stream calls against our runtime and the real Triton, both serving tests/integration/decoupled/models
with the same Python models: what comes back must agree (outputs, order, ids, the final flag, errors, status
codes). Needs the peer installed by tools/setup-triton.sh; skipped without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.triton_peer import TritonPeer, not_installed_reason
from tests.integration.decoupled.streams import Message, Stream, repeat_inputs, tensor
from tests.support.runtime_process import RuntimeProcess

_REASON = not_installed_reason()
pytestmark = [pytest.mark.triton, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]
MODELS = Path(__file__).parent / "models"
Server = RuntimeProcess | TritonPeer


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    with RuntimeProcess([MODELS]) as ours, TritonPeer([MODELS]) as triton:
        ours.wait_ready()
        triton.wait_ready(timeout=180)
        yield {"ours": ours, "triton": triton}


def _plain(messages: list[Message]) -> list[tuple[str, dict[str, list[Any]], bool | None]]:
    return [(m.id, m.outputs, m.final) for m in messages]


def _repeat(stream: Stream) -> object:
    stream.send("repeat_int32", repeat_inputs([100, 101, 102, 103], delay_ms=5), "r", empty_final=True)
    return _plain(stream.until_final())


def _repeat_without_empty_final(stream: Stream) -> object:
    stream.send("repeat_int32", repeat_inputs([7, 8], wait_ms=1), "r")
    got = [stream.next(), stream.next()]
    stream.send("square_int32", [tensor("IN", np.array([1], np.int32), "INT32")], "after")
    return _plain([*got, stream.next()])


def _zero(stream: Stream) -> object:
    stream.send("square_int32", [tensor("IN", np.array([0], np.int32), "INT32")], "z", empty_final=True)
    return _plain(stream.until_final())


def _square(stream: Stream) -> object:
    stream.send("square_int32", [tensor("IN", np.array([3], np.int32), "INT32")], "s")
    return _plain(stream.until_final())


def _fails_mid_stream(stream: Stream) -> object:
    stream.send("repeat_fails", [tensor("IN", np.array([1, 2, -3, 4], np.int32), "INT32")], "f")
    got = stream.until_final()
    stream.send("square_int32", [tensor("IN", np.array([1], np.int32), "INT32")], "after")
    return [m.outputs for m in got[:-1]], "negative element -3" in (got[-1].error or ""), _plain(stream.until_final())


def _not_decoupled(stream: Stream) -> object:
    stream.send("stream_post", [tensor("TOKEN", np.array([2], np.int32), "INT32")], "np", empty_final=True)
    return _plain(stream.until_final())


def _pipeline(stream: Stream) -> object:
    stream.send("stream_pipeline", [tensor("TEXT", np.array([1, 2, 3, 4], np.int32), "INT32")], "p", empty_final=True)
    got = stream.until_final()
    finals = [m.final for m in got]  # when the last token's response leaves, the generator may or may not have
    # sent its final flag yet (Triton and we both put the flag on that response if it has, else send it alone)
    return [m.outputs for m in got if m.outputs], {m.id for m in got}, finals.count(True), finals[-1]


def _unknown_model(stream: Stream) -> object:
    stream.send("no_such_model", [tensor("IN", np.array([1], np.int32), "INT32")], "u")
    return stream.next().error


STREAM_CASES: dict[str, Callable[[Stream], object]] = {
    "repeat": _repeat, "repeat without empty final": _repeat_without_empty_final, "zero responses": _zero,
    "final on the last response": _square, "error mid-stream": _fails_mid_stream,
    "not decoupled": _not_decoupled, "ensemble pipeline": _pipeline, "unknown model": _unknown_model,
}


@pytest.mark.parametrize("case", STREAM_CASES)
def test_same_stream_results(servers: dict[str, Server], case: str) -> None:
    seen = {}
    for name, server in servers.items():
        with Stream(server.grpc_url) as stream:
            seen[name] = STREAM_CASES[case](stream)
    assert seen["ours"] == seen["triton"]


@pytest.mark.parametrize("model", ["bls_repeat", "bls_repeat_async"])
def test_same_bls_results(servers: dict[str, Server], model: str) -> None:
    seen = {}
    for name, server in servers.items():
        with server.grpc_client() as client:
            result = client.infer(model, [tensor("IN", np.array([5, 6, 7], np.int32), "INT32")])
        seen[name] = {out: result.as_numpy(out).tolist() for out in ("OUT", "IDX", "RESPONSES")}
    assert seen["ours"] == seen["triton"]


def test_same_refusal_outside_the_stream_api(servers: dict[str, Server]) -> None:
    seen = {}
    for name, server in servers.items():
        answers = []
        with server.grpc_client() as client, pytest.raises(InferenceServerException) as caught:
            client.infer("repeat_int32", repeat_inputs([1]))
        answers.append((caught.value.status(), caught.value.message()))
        http_in = [httpclient.InferInput("IN", [1], "INT32"), httpclient.InferInput("DELAY", [1], "UINT32"),
                   httpclient.InferInput("WAIT", [1], "UINT32")]
        for item, dtype in zip(http_in, (np.int32, np.uint32, np.uint32), strict=True):
            item.set_data_from_numpy(np.zeros(1, dtype))
        with server.http_client() as client, pytest.raises(InferenceServerException) as caught:
            client.infer("repeat_int32", http_in)
        answers.append((caught.value.status(), caught.value.message()))
        seen[name] = answers
    assert seen["ours"] == seen["triton"]
