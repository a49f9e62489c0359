"""Statistics with Triton's semantics, checked on the runtime alone (the comparison with the real Triton is
tests/integration/triton_peer/test_statistics.py): queue and compute phases counted once per successful
request, batch_stats with all three phases per execution, and ensembles reporting their own requests with
the steps' compute phases summed, while the steps keep their own statistics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.models import build_chain_repository, mark_inline
from tests.support.runtime_process import RuntimeProcess

PHASES = ("compute_input", "compute_infer", "compute_output")


@pytest.fixture(scope="module", params=["threads", "inline"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    """The python steps on their instances' threads, or (EXECUTE_INLINE) on the loop, without a task."""
    root = tmp_path_factory.mktemp("repo")
    build_chain_repository(root, lengths=(2,))
    if request.param == "inline":
        assert mark_inline(root) == ["add_one_0", "add_one_1"]
    with RuntimeProcess([root]) as runtime:
        runtime.wait_ready(120)
        yield runtime


def _row(name: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [16], "FP32")
    tensor.set_data_from_numpy(np.zeros(16, np.float32))
    return tensor


def _entry(client: grpcclient.InferenceServerClient, model: str) -> dict[str, Any]:
    entry: dict[str, Any] = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return entry


def _count(entry: dict[str, Any], key: str) -> int:
    return int(entry["inference_stats"].get(key, {}).get("count", 0))


def _ns(entry: dict[str, Any], key: str) -> int:
    return int(entry["inference_stats"].get(key, {}).get("ns", 0))


def test_single_model_and_ensemble_statistics(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        for _ in range(4):
            client.infer("add_one_0", [_row("X")])
        for _ in range(3):
            client.infer("chain2", [_row("IN")])
        single, chain, second = (_entry(client, m) for m in ("add_one_0", "chain2", "add_one_1"))

    # the model: 4 direct requests and 3 as chain2's first step, each counted in every phase
    for key in ("success", "queue", *PHASES):
        assert _count(single, key) == 7, key
    assert _ns(single, "compute_input") > 0 and _ns(single, "compute_infer") > 0 and _ns(single, "compute_output") > 0
    assert (int(single["inference_count"]), int(single["execution_count"])) == (7, 7)
    (batch,) = single["batch_stats"]
    assert int(batch["batch_size"]) == 1
    assert all(int(batch[p]["count"]) == 7 and int(batch[p]["ns"]) > 0 for p in PHASES)

    # the ensemble: its own 3 requests, with the compute its two steps spent on them
    assert (int(chain["inference_count"]), int(chain["execution_count"])) == (3, 3)
    for key in ("success", "queue", *PHASES):
        assert _count(chain, key) == 3, key
    assert 0 < _ns(chain, "compute_infer") <= _ns(single, "compute_infer") + _ns(second, "compute_infer")
    assert [int(b["batch_size"]) for b in chain["batch_stats"]] == [1]
    assert int(chain["last_inference"]) > 0
    assert _count(second, "success") == 3 and int(second["execution_count"]) == 3


def test_refused_request_is_no_failure(server: RuntimeProcess) -> None:
    """Triton counts a request refused by validation (wrong shape) nowhere in the model's statistics."""
    with server.http_client() as client:
        before = client.get_inference_statistics("add_one_0")["model_stats"][0]["inference_stats"]["fail"]
        bad = httpclient.InferInput("X", [8], "FP32")
        bad.set_data_from_numpy(np.zeros(8, np.float32))
        with pytest.raises(Exception, match="unexpected shape"):
            client.infer("add_one_0", [bad])
        after = client.get_inference_statistics("add_one_0")["model_stats"][0]
        assert after["inference_stats"]["fail"] == before
        assert after["response_stats"] == {} and after["inference_stats"]["cache_hit"] == {"count": 0, "ns": 0}
    with server.grpc_client() as grpc:  # still serves
        assert grpc.infer("chain2", [_row("IN")]).as_numpy("OUT")[0] == 2.0


@pytest.mark.parametrize(("model", "tensor", "steps"), [("add_one_1", "X", ()), ("chain2", "IN", ("add_one_0", "add_one_1"))])
def test_each_answer_is_counted_before_the_client_can_ask(
    server: RuntimeProcess, model: str, tensor: str, steps: tuple[str, ...]
) -> None:
    """A python model's request is answered from its instance's thread (an ensemble's from the loop, its steps
    run on their instances' threads; inline, everything on the loop) while the statistics are counted on the
    event loop: a statistics request sent right after each answer, over either protocol, already counts it, and
    each of its steps."""
    with server.grpc_client() as grpc, server.http_client() as http:
        start = {name: _entry(grpc, name) for name in (model, *steps)}
        row = httpclient.InferInput(tensor, [16], "FP32")
        row.set_data_from_numpy(np.zeros(16, np.float32))
        for i in range(1, 41):
            if i % 2:
                grpc.infer(model, [_row(tensor)])
                entries = {name: _entry(grpc, name) for name in start}
            else:
                http.infer(model, [row])
                entries = {name: http.get_inference_statistics(name)["model_stats"][0] for name in start}
            for name, entry in entries.items():
                assert _count(entry, "success") == _count(start[name], "success") + i, name
                # protobuf's JSON leaves a count of 0 out: a model no earlier test ran starts without the key
                executions = int(start[name].get("execution_count", 0))
                assert int(entry["execution_count"]) == executions + i, name
