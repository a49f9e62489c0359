"""Every class of bad request is refused with Triton's code and a message naming the problem; serving goes on."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.runtime_process import RuntimeProcess


def one(name: str, array: np.ndarray, dtype: str) -> grpcclient.InferInput:
    item = grpcclient.InferInput(name, list(array.shape), dtype)
    item.set_data_from_numpy(array)
    return item


def good_inputs(batch: int = 1) -> list[grpcclient.InferInput]:
    a = np.ones((batch, 16), np.float32)
    return [one("INPUT0", a, "FP32"), one("INPUT1", a, "FP32")]


CASES = [
    ("unknown model", "nope", lambda: good_inputs(), None, "StatusCode.NOT_FOUND", "'nope'"),
    ("unknown version", "add_sub", lambda: good_inputs(), "7", "StatusCode.NOT_FOUND", "version 7"),
    ("wrong dtype", "add_sub",
     lambda: [one("INPUT0", np.ones((1, 16), np.float64), "FP64"), good_inputs()[1]], None,
     "StatusCode.INVALID_ARGUMENT", "input 'INPUT0' data-type is 'FP64', but model 'add_sub' expects 'FP32'"),
    ("wrong shape", "add_sub",
     lambda: [one("INPUT0", np.ones((1, 15), np.float32), "FP32"), good_inputs()[1]], None,
     "StatusCode.INVALID_ARGUMENT", "unexpected shape for input 'INPUT0'"),
    ("missing input", "add_sub", lambda: good_inputs()[:1], None,
     "StatusCode.INVALID_ARGUMENT", "missing required input(s) ['INPUT1']"),
    ("unknown input", "add_sub", lambda: [*good_inputs(), one("EXTRA", np.ones((1, 16), np.float32), "FP32")], None,
     "StatusCode.INVALID_ARGUMENT", "unexpected inference input 'EXTRA'"),
    ("batch too large", "add_sub", lambda: good_inputs(9), None,
     "StatusCode.INVALID_ARGUMENT", "batch-size must be <= 8"),
    ("unavailable model", "init_fails", lambda: [one("X", np.ones((1,), np.float32), "FP32")], None,  # as Triton
     "StatusCode.NOT_FOUND", "cannot open the tokenizer vocabulary"),
]


@pytest.mark.parametrize(("case", "model", "inputs", "version", "status", "message"), CASES, ids=[c[0] for c in CASES])
def test_refused_and_still_serving(
    server: RuntimeProcess, case: str, model: str, inputs: object, version: str | None, status: str, message: str
) -> None:
    with server.grpc_client() as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, inputs(), model_version=version or "")  # type: ignore[operator]
        assert info.value.status() == status, info.value
        assert message in info.value.message(), info.value.message()
        ok = client.infer("add_sub", good_inputs())
        assert ok.as_numpy("OUTPUT0") is not None


def test_unknown_requested_output(server: RuntimeProcess) -> None:
    with server.grpc_client() as client, pytest.raises(InferenceServerException, match="unexpected inference output 'NOPE'"):
        client.infer("add_sub", good_inputs(), outputs=[grpcclient.InferRequestedOutput("NOPE")])


def _raw_call(server: RuntimeProcess, request: service_pb2.ModelInferRequest) -> str:
    import grpc

    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request, timeout=10)
        return f"{info.value.code()}: {info.value.details()}"


def _request(datatype: str, shape: list[int], raw: list[bytes], name: str = "INPUT0") -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.extend(raw)
    return request


def test_malformed_raw_contents_never_crash(server: RuntimeProcess) -> None:
    cases = {
        "wrong byte size": (_request("FP32", [1, 16], [b"\x00" * 10]), "unexpected total byte size 10 for input 'INPUT0'"),
        "raw count mismatch": (_request("FP32", [1, 16], [b"\x00" * 64, b"\x00" * 64]), "raw input contents"),
        "negative dim": (_request("FP32", [-1, 16], [b""]), "negative dimension"),
        "unknown datatype": (_request("FP8", [1, 16], [b"\x00" * 16]), "unknown datatype 'FP8'"),
        "truncated bytes": (_request("BYTES", [2], [b"\x05\x00\x00\x00ab"], name="text"), "element 0 declares 5 bytes"),
    }
    for case, (request, message) in cases.items():
        text = _raw_call(server, request)
        assert "INVALID_ARGUMENT" in text and message in text, (case, text)
    with server.grpc_client() as client:
        assert client.is_server_live()
        assert client.infer("add_sub", good_inputs()).as_numpy("OUTPUT0") is not None


def test_oversized_message_refused_cleanly(repository: object) -> None:
    from pathlib import Path

    assert isinstance(repository, Path)
    with RuntimeProcess([repository], ["--grpc-max-message-bytes=65536", "--model-control-mode=explicit",
                                       "--load-model=add_sub"]) as small:
        small.wait_model_ready("add_sub")
        big = np.ones((8, 16), np.float32)
        with small.grpc_client() as client:
            inputs = [one("INPUT0", big, "FP32"), one("INPUT1", big, "FP32")]
            inputs[0].set_data_from_numpy(np.ones((8, 16), np.float32))
            huge = grpcclient.InferInput("INPUT0", [8, 16], "FP32")
            huge._raw_content = b"\x00" * 200_000  # a message over the limit, however it is shaped
            with pytest.raises(InferenceServerException) as info:
                client.infer("add_sub", [huge, inputs[1]])
            assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert client.infer("add_sub", inputs).as_numpy("OUTPUT0") is not None
