"""The calls NVIDIA's sequence examples make (simple_grpc_sequence_sync, simple_grpc_sequence_stream,
simple_grpc_aio_sequence_stream, simple_http_sequence_sync), written for these tests, and the answers they
expect. Shared by the runtime tests and the comparison with the real Triton."""

from __future__ import annotations

import asyncio
import queue
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

MODELS = Path(__file__).parent / "models"
VALUES = [11, 7, 5, 3, 2, 0, 1]  # the examples' values; each sequence sends a first value, then these
SeqId = int | str


def value_input(module: Any, value: int) -> Any:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
    return tensor


def sync_send(client: Any, module: Any, model: str, values: list[int], sequence_id: SeqId) -> list[int]:
    """One sequence, one blocking call per value, START on the first and END on the last (as the examples)."""
    results = []
    for count, value in enumerate(values, start=1):
        result = client.infer(
            model, [value_input(module, value)], outputs=[module.InferRequestedOutput("OUTPUT")],
            sequence_id=sequence_id, sequence_start=count == 1, sequence_end=count == len(values),
        )
        results.append(int(result.as_numpy("OUTPUT")[0][0]))
    return results


def expected_int(first: int, sign: int, sequence_id: int, dyna: bool) -> list[int]:
    """simple_sequence answers INPUT + START; the dyna model also adds the correlation ID on END."""
    out = [first + 1] + [sign * v for v in VALUES]
    if dyna:
        out[-1] += sequence_id
    return out


def expected_string(dyna: bool, sequence_id: str) -> list[int]:
    """The third (string-ID) sequence of the stream examples: [20] + negated values."""
    if not dyna:
        return [21] + [-v for v in VALUES]
    out = [20]
    for v in VALUES:
        out.append(out[-1] - v)
    out[-1] += int(sequence_id)
    return out


def sequence_requests(model: str, values: list[int], sequence_id: SeqId, module: Any) -> list[dict[str, Any]]:
    return [
        {
            "model_name": model,
            "inputs": [value_input(module, value)],
            "outputs": [module.InferRequestedOutput("OUTPUT")],
            "request_id": f"{sequence_id}_{count}",
            "sequence_id": sequence_id,
            "sequence_start": count == 1,
            "sequence_end": count == len(values),
        }
        for count, value in enumerate(values, start=1)
    ]


def stream_plan(dyna: bool, offset: int = 0) -> list[tuple[str, list[int], SeqId]]:
    int_model = "simple_dyna_sequence" if dyna else "simple_sequence"
    string_model = "simple_string_dyna_sequence" if dyna else "simple_sequence"
    string_id = str(1002 + offset) if dyna else str(uuid.uuid4())
    return [
        (int_model, [0, *VALUES], 1000 + offset * 2),
        (int_model, [100] + [-v for v in VALUES], 1001 + offset * 2),
        (string_model, [20] + [-v for v in VALUES], string_id),
    ]


def check_stream_results(plan: list[tuple[str, list[int], SeqId]], by_id: dict[str, list[int]], dyna: bool) -> None:
    (_, _, id0), (_, _, id1), (_, _, sid) = plan
    assert isinstance(id0, int) and isinstance(id1, int) and isinstance(sid, str)
    assert by_id[str(id0)] == expected_int(0, 1, id0, dyna)
    assert by_id[str(id1)] == expected_int(100, -1, id1, dyna)
    assert by_id[sid] == expected_string(dyna, sid)


def grpc_stream(url: str, dyna: bool, offset: int = 0) -> None:
    """simple_grpc_sequence_stream: three sequences on one stream, answers matched by request id."""
    plan = stream_plan(dyna, offset)
    answers: queue.Queue[Any] = queue.Queue()

    def callback(sink: queue.Queue[Any], result: Any, error: Any) -> None:
        sink.put(error if error else result)

    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=partial(callback, answers))
        for model, values, sequence_id in plan:
            for request in sequence_requests(model, values, sequence_id, grpcclient):
                client.async_stream_infer(**request)
        by_id: dict[str, list[int]] = {}
        for _ in range(sum(len(values) for _, values, _ in plan)):
            item = answers.get(timeout=120)
            assert not isinstance(item, Exception), str(item)
            this_id = item.get_response().id.split("_")[0]
            by_id.setdefault(this_id, []).append(int(item.as_numpy("OUTPUT")[0][0]))
        client.stop_stream()
    check_stream_results(plan, by_id, dyna)


async def grpc_aio_stream(url: str, dyna: bool, offset: int = 0) -> None:
    """simple_grpc_aio_sequence_stream: the same three sequences from an async request iterator."""
    plan = stream_plan(dyna, offset)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for model, values, sequence_id in plan:
            for request in sequence_requests(model, values, sequence_id, grpcaio):
                yield request

    by_id: dict[str, list[int]] = {}
    expected = sum(len(values) for _, values, _ in plan)
    async with grpcaio.InferenceServerClient(url) as client:
        stream = client.stream_infer(inputs_iterator=requests())
        async for result, error in stream:
            assert error is None, str(error)
            this_id = result.get_response().id.split("_")[0]
            by_id.setdefault(this_id, []).append(int(result.as_numpy("OUTPUT")[0][0]))
            if sum(len(v) for v in by_id.values()) == expected:
                break
    check_stream_results(plan, by_id, dyna)


def run_aio(url: str, dyna: bool) -> None:
    asyncio.run(grpc_aio_stream(url, dyna))


def sync_example(client: Any, module: Any, dyna: bool, offset: int = 0) -> None:
    """simple_grpc_sequence_sync / simple_http_sequence_sync: two sequences, one after the other."""
    model = "simple_dyna_sequence" if dyna else "simple_sequence"
    id0, id1 = 1000 + offset * 2, 1001 + offset * 2
    result0 = sync_send(client, module, model, [0, *VALUES], id0)
    result1 = sync_send(client, module, model, [100] + [-v for v in VALUES], id1)
    assert result0 == expected_int(0, 1, id0, dyna)
    assert result1 == expected_int(100, -1, id1, dyna)


def http_client(url: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url)
