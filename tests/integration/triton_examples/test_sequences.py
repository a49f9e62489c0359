"""NVIDIA's sequence examples, as the project's tests, against ours and the real Triton:
simple_grpc_sequence_sync_infer_client, simple_grpc_sequence_stream_infer_client,
simple_grpc_aio_sequence_stream_infer_client, simple_grpc_aio_sequence_sync_infer_client,
simple_http_sequence_sync_infer_client and simple_http_aio_sequence_sync_infer_client, plus their `-d`
(simple_dyna_sequence: oldest strategy with a CORRID control input) runs.

Three sequences: two with integer correlation IDs (1000, 1001), one with a string ID (a UUID; "1002" with -d);
the model answers INPUT + 1 on START and, with -d, + the correlation ID on END.
"""

from __future__ import annotations

import asyncio
import queue
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio

from tests.integration.triton_examples.support import serve
from tests.support.server_process import ServerProcess

MODELS = ("simple_sequence", "simple_dyna_sequence")
VALUES = [11, 7, 5, 3, 2, 0, 1]
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


def _sequences(dyna: bool) -> list[tuple[int | str, list[int], str]]:
    """(correlation ID, values, model) of the examples' sequences. With -d the examples send their string-ID
    sequence to simple_string_dyna_sequence, whose string CORRID control tritonserver 2.51 cannot deliver to a
    Python model ("unexpected number of string elements 2 for inference input 'CORRID'"): left out here."""
    model = "simple_dyna_sequence" if dyna else "simple_sequence"
    negated = [-v for v in VALUES]
    sequences: list[tuple[int | str, list[int], str]] = [(1000, [0, *VALUES], model), (1001, [100, *negated], model)]
    if not dyna:
        sequences.append((str(uuid.uuid4()), [20, *negated], "simple_sequence"))
    return sequences


def _expected(sequence_id: int | str, values: list[int], dyna: bool) -> list[int]:
    """What the examples expect: INPUT, +1 on START, and with -d + the correlation ID on END."""
    out = [values[0] + 1, *values[1:]]
    if dyna:
        out[-1] += int(sequence_id)
    return out


def _check(results: dict[str, list[int]], dyna: bool) -> None:
    for sequence_id, values, _ in _sequences(dyna):
        if isinstance(sequence_id, str) and not dyna:
            sequence_id = next(k for k in results if k not in ("1000", "1001"))
        assert results[str(sequence_id)] == _expected(sequence_id, values, dyna), (sequence_id, results)


def _inputs(module: Any, value: int) -> list[Any]:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full([1, 1], value, dtype=np.int32))
    return [tensor]


@pytest.mark.parametrize("dyna", [False, True])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sequence_sync_infer_clients(request: pytest.FixtureRequest, server: ServerProcess, protocol: str,
                                     dyna: bool) -> None:
    """simple_grpc_sequence_sync_infer_client and simple_http_sequence_sync_infer_client (with and without -d)."""
    module: Any = grpcclient if protocol == "grpc" else httpclient
    client: Any = server.grpc_client() if protocol == "grpc" else server.http_client()
    results: dict[str, list[int]] = {}
    try:
        for sequence_id, values, model in _sequences(dyna):
            got = results.setdefault(str(sequence_id), [])
            for count, value in enumerate(values, start=1):
                result = client.infer(model_name=model, inputs=_inputs(module, value),
                                      outputs=[module.InferRequestedOutput("OUTPUT")], sequence_id=sequence_id,
                                      sequence_start=count == 1, sequence_end=count == len(values))
                got.append(int(result.as_numpy("OUTPUT")[0][0]))
    finally:
        client.close()
    _check(results, dyna)


@pytest.mark.parametrize("dyna", [False, True])
def test_simple_grpc_sequence_stream_infer_client(request: pytest.FixtureRequest, server: ServerProcess,
                                                  dyna: bool) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    sequences = _sequences(dyna)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), answers),
                            stream_timeout=None)
        for sequence_id, values, model in sequences:
            for count, value in enumerate(values, start=1):
                client.async_stream_infer(model_name=model, inputs=_inputs(grpcclient, value),
                                          outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                                          request_id=f"{sequence_id}_{count}", sequence_id=sequence_id,
                                          sequence_start=count == 1, sequence_end=count == len(values))
        items = [answers.get(timeout=DEADLINE_S) for _ in range(sum(len(v) for _, v, _ in sequences))]
        client.stop_stream()
    results: dict[str, list[int]] = {}
    for item in items:
        assert isinstance(item, grpcclient.InferResult), item
        this_id = item.get_response().id.split("_")[0]
        results.setdefault(this_id, []).append(int(item.as_numpy("OUTPUT")[0][0]))
    _check(results, dyna)


def test_simple_grpc_aio_sequence_stream_infer_client(request: pytest.FixtureRequest, server: ServerProcess) -> None:
    sequences = _sequences(False)

    async def requests() -> Any:
        for sequence_id, values, model in sequences:
            for count, value in enumerate(values, start=1):
                yield {"model_name": model, "inputs": _inputs(grpcaio, value),
                       "outputs": [grpcaio.InferRequestedOutput("OUTPUT")], "request_id": f"{sequence_id}_{count}",
                       "sequence_id": sequence_id, "sequence_start": count == 1,
                       "sequence_end": count == len(values)}

    async def main() -> dict[str, list[int]]:
        client = grpcaio.InferenceServerClient(url=server.grpc_url)
        results: dict[str, list[int]] = {}
        try:
            async for result, error in client.stream_infer(inputs_iterator=requests(), stream_timeout=DEADLINE_S):
                assert error is None, error
                this_id = result.get_response().id.split("_")[0]
                results.setdefault(this_id, []).append(int(result.as_numpy("OUTPUT")[0][0]))
                if sum(len(v) for v in results.values()) == sum(len(v) for _, v, _ in sequences):
                    break
        finally:
            await client.close()
        return results

    _check(asyncio.run(main()), False)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_aio_sequence_sync_infer_clients(request: pytest.FixtureRequest, server: ServerProcess, protocol: str) -> None:
    """simple_grpc_aio_sequence_sync_infer_client and simple_http_aio_sequence_sync_infer_client."""
    module: Any = grpcaio if protocol == "grpc" else httpaio

    async def main() -> dict[str, list[int]]:
        client = module.InferenceServerClient(url=server.grpc_url if protocol == "grpc" else server.http_url)
        results: dict[str, list[int]] = {}
        try:
            for sequence_id, values, model in _sequences(False):
                got = results.setdefault(str(sequence_id), [])
                for count, value in enumerate(values, start=1):
                    result = await client.infer(model_name=model, inputs=_inputs(module, value),
                                                outputs=[module.InferRequestedOutput("OUTPUT")],
                                                sequence_id=sequence_id, sequence_start=count == 1,
                                                sequence_end=count == len(values))
                    got.append(int(result.as_numpy("OUTPUT")[0][0]))
        finally:
            await client.close()
        return results

    _check(asyncio.run(main()), False)
