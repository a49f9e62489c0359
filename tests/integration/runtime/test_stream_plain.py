"""ModelStreamInfer to models that are not decoupled: a python model on its threads and a 2-step python ensemble
(`chain2`), whose streamed requests the native core answers as ModelInfer's (`DataPlane.infer_then`, the answer
written from the thread that gave it), interleaved on one stream with errors: every message the same as grpcio's
front end writes (ids, outputs, the ensemble's versions, the final flag), and the statistics count each request."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from bench.models import build_chain_repository
from tests.support.runtime_process import RuntimeProcess

COUNT = 12  # requests per model on the stream


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RuntimeProcess]]:
    repository = tmp_path_factory.mktemp("chain")
    build_chain_repository(repository, [2])
    started = {name: RuntimeProcess([repository], [f"--grpc-frontend={name}"]).start() for name in ("native", "grpcio")}
    try:
        for proc in started.values():
            proc.wait_ready()
            proc.wait_model_ready("chain2")
        yield started
    finally:
        for proc in started.values():
            proc.stop()


def _request(model: str, value: float, request_id: str, size: int = 16) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    name = "IN" if model == "chain2" else "X"
    request.inputs.add(name=name, datatype="FP32", shape=[size])
    request.raw_input_contents.append(np.full(size, value, np.float32).tobytes())
    return request


def _success(proc: RuntimeProcess, model: str) -> int:
    with proc.grpc_client() as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats["inference_stats"]["success"].get("count", 0))


def test_a_stream_of_plain_requests_is_answered_as_grpcio_answers_it(servers: dict[str, RuntimeProcess]) -> None:
    requests = []
    for index in range(COUNT):
        requests += [_request("add_one_0", index, f"m{index}"), _request("chain2", index, f"e{index}")]
    requests += [_request("add_one_0", 0, "short", size=15), _request("chain2", 0, "e-short", size=15)]
    answers: dict[str, dict[str, pb.ModelStreamInferResponse]] = {}
    for name, proc in servers.items():
        before = {model: _success(proc, model) for model in ("add_one_0", "chain2")}
        with grpc.insecure_channel(proc.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            messages = list(stub.ModelStreamInfer(iter(requests), timeout=60))
        answers[name] = {message.infer_response.id: message for message in messages}
        assert len(messages) == len(requests) == len(answers[name])
        counted = {model: _success(proc, model) - before[model] for model in before}
        assert counted == {"add_one_0": 2 * COUNT, "chain2": COUNT}  # add_one_0 is chain2's first step too
    assert answers["native"] == answers["grpcio"]
    native = answers["native"]
    for index in range(COUNT):
        model, chain = native[f"m{index}"].infer_response, native[f"e{index}"].infer_response
        assert np.frombuffer(model.raw_output_contents[0], np.float32).tolist() == [index + 1.0] * 16
        assert np.frombuffer(chain.raw_output_contents[0], np.float32).tolist() == [index + 2.0] * 16
        assert chain.parameters["ensemble_versions"].string_param  # the one version set it ran on
        assert model.parameters["triton_final_response"].bool_param and chain.parameters["triton_final_response"].bool_param
    assert "unexpected" in native["short"].error_message and "unexpected" in native["e-short"].error_message
