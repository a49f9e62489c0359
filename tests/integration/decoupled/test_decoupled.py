"""Decoupled models, streamed over ModelStreamInfer, against a real runtime process with tritonclient.

The calls are those of Triton's `simple_grpc_custom_repeat` example and of the stream patterns Triton users
run (a decoupled model inside an ensemble, BLS to a decoupled model); every test ends by checking the server
still answers a plain request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.decoupled.streams import Message, Stream, repeat_inputs, tensor, to_message
from tests.support.runtime_process import RuntimeProcess

MODELS = Path(__file__).parent / "models"
REFUSAL = "doesn't support models with decoupled transaction policy"


@pytest.fixture(scope="module")
def server() -> Iterator[RuntimeProcess]:
    with RuntimeProcess([MODELS]) as proc:
        proc.wait_ready()
        yield proc


def still_serving(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        result = client.infer("stream_post", [tensor("TOKEN", np.array([41], np.int32), "INT32")])
        assert result.as_numpy("WORD").tolist() == [42]


@pytest.mark.parametrize("empty_final", [True, False])
def test_repeat_int32_as_the_example(server: RuntimeProcess, empty_final: bool) -> None:
    values = list(range(100, 110))
    with Stream(server.grpc_url) as stream:
        stream.send("repeat_int32", repeat_inputs(values, delay_ms=10, wait_ms=5), "r1", empty_final=empty_final,
                    outputs=["OUT", "IDX"])
        got = [stream.next() for _ in values]
        assert [m.outputs["OUT"] for m in got] == [[v] for v in values]  # in order, one element each
        assert [m.outputs["IDX"] for m in got] == [[i] for i in range(len(values))]
        assert {(m.id, m.final, m.error) for m in got} == {("r1", False, None)}
        if empty_final:  # the final flag alone, as an empty response marked final
            assert stream.next() == Message(id="r1", outputs={}, final=True, parameters={"triton_final_response": True})
        stream.send("square_int32", [tensor("IN", np.array([1], np.int32), "INT32")], "after")
        following = stream.next()  # without empty finals, nothing was sent for r1's final flag
        assert (following.id, following.outputs, following.final) == ("after", {"OUT": [1]}, True)
    still_serving(server)


def test_only_the_requested_outputs_come_back(server: RuntimeProcess) -> None:
    with Stream(server.grpc_url) as stream:
        stream.send("repeat_int32", repeat_inputs([7, 8]), "r", empty_final=True, outputs=["OUT"])
        got = stream.until_final()
    assert [m.outputs for m in got] == [{"OUT": [7]}, {"OUT": [8]}, {}]


def test_zero_responses_then_the_final_flag(server: RuntimeProcess) -> None:
    with Stream(server.grpc_url) as stream:
        stream.send("square_int32", [tensor("IN", np.array([0], np.int32), "INT32")], "zero", empty_final=True)
        assert stream.until_final() == [Message("zero", {}, True, parameters={"triton_final_response": True})]
        stream.send("repeat_int32", repeat_inputs([]), "empty", empty_final=True)
        assert [(m.id, m.outputs, m.final) for m in stream.until_final()] == [("empty", {}, True)]
        stream.send("square_int32", [tensor("IN", np.array([3], np.int32), "INT32")], "three")
        got = stream.until_final()  # the final flag rides on the last response
        assert [(m.outputs, m.final) for m in got] == [({"OUT": [3]}, False)] * 2 + [({"OUT": [3]}, True)]
    still_serving(server)


def test_model_raising_mid_stream_is_an_error_on_the_stream(server: RuntimeProcess) -> None:
    with Stream(server.grpc_url) as stream:
        stream.send("repeat_fails", [tensor("IN", np.array([1, 2, -3, 4], np.int32), "INT32")], "fails")
        got = stream.until_final()
        assert [m.outputs for m in got[:2]] == [{"OUT": [1]}, {"OUT": [2]}]
        assert got[2].error is not None and "negative element -3" in got[2].error
        assert len(got) == 3
        # the stream stays usable, for the same model and others
        stream.send("repeat_fails", [tensor("IN", np.array([5], np.int32), "INT32")], "again", empty_final=True)
        assert [(m.id, m.outputs, m.final) for m in stream.until_final()] == [
            ("again", {"OUT": [5]}, False), ("again", {}, True)]
        stream.send("square_int32", [tensor("IN", np.array([1], np.int32), "INT32")], "other")
        assert [(m.id, m.outputs) for m in stream.until_final()] == [("other", {"OUT": [1]})]
    still_serving(server)


def test_system_exit_in_a_decoupled_model_fails_only_its_request(server: RuntimeProcess) -> None:
    with Stream(server.grpc_url) as stream:
        stream.send("repeat_fails", [tensor("IN", np.array([1, -99], np.int32), "INT32")], "exit")
        got = stream.until_final()  # SystemExit from execute: contained, the request's final error
        assert [m.outputs for m in got[:-1]] == [{"OUT": [1]}]
        assert got[-1].error is not None and "SystemExit(3)" in got[-1].error
        # from the model's own thread: the sender it dropped ends the request instead of leaving it hanging
        stream.send("repeat_fails", [tensor("IN", np.array([-98, 6, 7], np.int32), "INT32")], "thread")
        got = stream.until_final()
        assert [m.outputs for m in got[:-1]] == [{"OUT": [6]}, {"OUT": [7]}]
        assert got[-1].error == ("model 'repeat_fails': the response sender was released without sending "
                                 "TRITONSERVER_RESPONSE_COMPLETE_FINAL")
    still_serving(server)


def test_stream_errors_for_bad_requests_keep_the_stream(server: RuntimeProcess) -> None:
    with Stream(server.grpc_url) as stream:
        stream.send("no_such_model", [tensor("IN", np.array([1], np.int32), "INT32")], "x")
        assert stream.next().error == "Request for unknown model: 'no_such_model' is not found"
        stream.send("square_int32", [tensor("IN", np.array([1.0], np.float32), "FP32")], "y")
        error = stream.next().error
        assert error is not None and "data-type is 'FP32', but model 'square_int32' expects 'INT32'" in error
        stream.send("square_int32", [tensor("IN", np.array([1], np.int32), "INT32")], "z")
        assert stream.next().outputs == {"OUT": [1]}


@pytest.mark.parametrize(("model", "expected"), [
    ("bls_repeat", ([5, 6, 7], [0, 1, 2], 4)),  # exec(decoupled=True): 3 responses and the empty final one
    ("bls_repeat_async", ([5, 6, 7, 7, 6, 5], [0, 1, 2, 0, 1, 2], 8)),  # two async_exec(decoupled=True) at once
])
def test_bls_to_a_decoupled_model(server: RuntimeProcess, model: str, expected: tuple[list[int], list[int], int]) -> None:
    with server.grpc_client() as client:
        result = client.infer(model, [tensor("IN", np.array([5, 6, 7], np.int32), "INT32")])
    out, idx, responses = expected
    assert result.as_numpy("OUT").tolist() == out
    assert result.as_numpy("IDX").tolist() == idx
    assert result.as_numpy("RESPONSES").tolist() == [responses]
    still_serving(server)


def test_ensemble_streams_every_token_through_the_graph(server: RuntimeProcess) -> None:
    text = [1, 2, 3, 4, 5, 6]
    with Stream(server.grpc_url) as stream:
        stream.send("stream_pipeline", [tensor("TEXT", np.array(text, np.int32), "INT32")], "p", empty_final=True)
        got = stream.until_final()
    tokens = [m for m in got if m.outputs]
    assert [m.outputs["WORD"] for m in tokens] == [[t * 10 + 1] for t in text]  # pre (x10), repeat, post (+1)
    assert [m.outputs["IDX"] for m in tokens] == [[i] for i in range(len(text))]
    assert {m.id for m in got} == {"p"}
    assert [m.final for m in got] == [False] * (len(got) - 1) + [True]  # one final flag, on the last message
    versions = {m.parameters["ensemble_versions"] for m in tokens if m.parameters}
    assert versions == {"repeat_int32:1,stream_post:1,stream_pre:1"}  # one version set for every response
    still_serving(server)


def test_requests_of_one_stream_run_concurrently(server: RuntimeProcess) -> None:
    """The slow request (it waits for the fast one's release) is sent first: handled one at a time it would
    wait its whole minute and report OUT 0; concurrently the release comes first and the wait sees it."""
    with Stream(server.grpc_url) as stream:
        stream.send("gate_int32", [tensor("IN", np.array([1, 60_000], np.int32), "INT32")], "slow")
        stream.send("gate_int32", [tensor("IN", np.array([1, 0], np.int32), "INT32")], "fast")
        got = {message.id: message.outputs for message in (stream.next(), stream.next())}
    # by id: the two answers race from their threads (the release's answer may come second), as in Triton
    assert got == {"fast": {"OUT": [2]}, "slow": {"OUT": [1]}}  # the wait was released, not timed out
    still_serving(server)


def test_aio_client_stream(server: RuntimeProcess) -> None:
    async def run() -> list[Message]:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            async def requests() -> AsyncIterator[dict[str, Any]]:
                yield {"model_name": "repeat_int32", "inputs": repeat_inputs([3, 4, 5], delay_ms=5),
                       "request_id": "aio"}
                yield {"model_name": "square_int32", "inputs": [tensor("IN", np.array([2], np.int32), "INT32")],
                       "request_id": "sq"}

            got: list[Message] = []
            async for result, error in client.stream_infer(requests()):
                got.append(to_message(result, error))
                if len(got) == 5:
                    break
            return got

    got = asyncio.run(run())  # the aio client cannot ask for empty finals (it refuses triton_ parameters)
    assert [(m.outputs.get("OUT"), m.final) for m in got if m.id == "aio"] == [([3], False), ([4], False), ([5], False)]
    assert [(m.outputs.get("OUT"), m.final) for m in got if m.id == "sq"] == [([2], False), ([2], True)]
    still_serving(server)


@pytest.mark.parametrize("model", ["repeat_int32", "stream_pipeline"])
def test_model_infer_on_a_decoupled_model_is_tritons_error(server: RuntimeProcess, model: str) -> None:
    inputs = repeat_inputs([1]) if model == "repeat_int32" else [tensor("TEXT", np.array([1], np.int32), "INT32")]
    with server.grpc_client() as client, pytest.raises(InferenceServerException) as caught:
        client.infer(model, inputs)
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
    assert caught.value.message() == f"ModelInfer RPC {REFUSAL}"
    http_inputs = []
    for grpc_input in inputs:
        shape = [int(d) for d in grpc_input.shape()]
        http_input = httpclient.InferInput(grpc_input.name(), shape, grpc_input.datatype())
        http_input.set_data_from_numpy(np.zeros(shape, _numpy(grpc_input.datatype())))
        http_inputs.append(http_input)
    with server.http_client() as client, pytest.raises(InferenceServerException) as caught:
        client.infer(model, http_inputs)
    assert caught.value.status() == "501"
    assert caught.value.message() == f"HTTP end point {REFUSAL}"
    still_serving(server)


def _numpy(datatype: str) -> type[Any]:
    return {"INT32": np.int32, "UINT32": np.uint32}[datatype]


def test_stream_in_flight_limit_holds_the_next_request() -> None:
    """With one request of a stream in flight at a time, the release cannot start while the wait runs: the
    wait ends unreleased (OUT 0) and only then is the release read."""
    with RuntimeProcess([MODELS], ["--grpc-stream-max-in-flight=1"]) as proc:
        proc.wait_ready()
        with Stream(proc.grpc_url) as stream:
            stream.send("gate_int32", [tensor("IN", np.array([3, 1500], np.int32), "INT32")], "wait")
            stream.send("gate_int32", [tensor("IN", np.array([3, 0], np.int32), "INT32")], "release")
            got = [stream.next(), stream.next()]
        assert [(m.id, m.outputs) for m in got] == [("wait", {"OUT": [0]}), ("release", {"OUT": [2]})]
        still_serving(proc)



def _counts(server: RuntimeProcess, model: str) -> tuple[int, int, int]:
    """The model's requests that succeeded, failed, and its executions (statistics as JSON: counts are strings)."""
    with server.grpc_client() as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    inference = stats["inference_stats"]
    return (int(inference["success"].get("count", 0)), int(inference["fail"].get("count", 0)),
            int(stats.get("execution_count", 0)))


def test_streamed_requests_are_counted_as_they_end(server: RuntimeProcess) -> None:
    """Requests the native core answers without a task (a decoupled model on its own thread): each a success
    and an execution once its final flag was sent, read by the statistics the moment the client has it."""
    before = _counts(server, "repeat_int32")
    with Stream(server.grpc_url) as stream:
        for index in range(5):
            stream.send("repeat_int32", repeat_inputs([index, index]), f"c{index}", empty_final=True)
        finals = [m for _ in range(5 * 3) if (m := stream.next()).final]
        assert sorted(m.id for m in finals) == [f"c{i}" for i in range(5)]
    success, fail, executions = _counts(server, "repeat_int32")
    assert (success - before[0], fail - before[1], executions - before[2]) == (5, 0, 5)
    still_serving(server)


def test_a_client_gone_mid_request_leaves_it_uncounted(server: RuntimeProcess) -> None:
    """A stream closed while its request still sends: the model's later responses are dropped, the request is
    neither a success nor a failure (as a cancelled request on the task path), and the server serves on."""
    before = _counts(server, "repeat_int32")
    with Stream(server.grpc_url) as stream:
        stream.send("repeat_int32", repeat_inputs([1, 2], delay_ms=500), "gone", empty_final=True)
        assert stream.next().outputs["OUT"] == [1]  # the first response came; the second is half a second away
        stream.client.stop_stream(cancel_requests=True)  # the client goes away (not a half-close: that waits)
    time.sleep(1.5)  # past the model's last send: nothing of it may be counted
    success, fail, executions = _counts(server, "repeat_int32")
    assert (success - before[0], fail - before[1], executions - before[2]) == (0, 0, 1)
    still_serving(server)
