"""NVIDIA's decoupled example, as the project's test, against ours and the real Triton:
simple_grpc_custom_repeat (repeat_int32 streams one response per input element over ModelStreamInfer)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.triton_examples.support import serve
from tests.support.server_process import ServerProcess

MODELS = ("repeat_int32",)
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


def test_simple_grpc_custom_repeat(request: pytest.FixtureRequest, server: ServerProcess) -> None:
    repeat_count, data_offset, delay_time, wait_time = 10, 100, 1000, 1000
    inputs = [grpcclient.InferInput("IN", [repeat_count], "INT32"),
              grpcclient.InferInput("DELAY", [repeat_count], "UINT32"),
              grpcclient.InferInput("WAIT", [1], "UINT32")]
    inputs[0].set_data_from_numpy(np.arange(data_offset, data_offset + repeat_count, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.ones([repeat_count], dtype=np.uint32) * delay_time)
    inputs[2].set_data_from_numpy(np.array([wait_time], dtype=np.uint32))
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(url=server.grpc_url) as client:
        client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), answers))
        client.async_stream_infer(model_name="repeat_int32", inputs=inputs,
                                  outputs=[grpcclient.InferRequestedOutput("OUT")])
        results: list[Any] = []
        while len(results) < repeat_count:  # as the example: stop at the first error
            results.append(answers.get(timeout=DEADLINE_S))
            assert isinstance(results[-1], grpcclient.InferResult), results[-1]
    for expected, item in enumerate(results, start=data_offset):
        out = item.as_numpy("OUT")
        assert len(out) == 1 and out[0] == expected, (expected, out)
