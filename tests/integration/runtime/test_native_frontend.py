"""The native gRPC front end (--grpc-frontend=native) against a real runtime process, with real clients; each
refusal is compared with what the grpcio front end answers to the same bytes, from a second process over the
same repository. (ENSEMBLE_TEST_GRPC_FRONTEND=native runs the other runtime tests against it too.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from ensemble_runtime.dtypes import serialize_bytes
from ensemble_runtime.server import GRPCIO_UNHARDENED
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.support.runtime_process import RuntimeProcess

LIMIT = 1024 * 1024
RESTRICTED = "statistics:admin=s3cret"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
Answer = tuple[grpc.StatusCode, str]


def _start(repository: Path, frontend: str) -> RuntimeProcess:
    return RuntimeProcess([repository], [f"--grpc-frontend={frontend}", "--strict-readiness=false",
                                         f"--grpc-max-message-bytes={LIMIT}",
                                         f"--grpc-restricted-protocol={RESTRICTED}"]).start()


@pytest.fixture(scope="module")
def servers(repository: Path) -> Iterator[dict[str, RuntimeProcess]]:
    native, grpcio = _start(repository, "native"), _start(repository, "grpcio")
    try:
        for proc in (native, grpcio):
            proc.wait_ready()
            proc.wait_model_ready("add_sub")
            proc.wait_model_ready("py_add_sub")
        yield {"native": native, "grpcio": grpcio}
    finally:
        native.stop()
        grpcio.stop()


@pytest.fixture(scope="module")
def native(servers: dict[str, RuntimeProcess]) -> RuntimeProcess:
    return servers["native"]


def _infer_request(model: str, shape: list[int], raw: bytes, **fields: object) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, **fields)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=shape)
        request.raw_input_contents.append(raw)
    return request


def _answer(proc: RuntimeProcess, method: str, payload: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> Answer:
    """(code, details) of one unary call with these exact request bytes; OK and '' when it succeeds."""
    with grpc.insecure_channel(proc.grpc_url) as channel:
        call = channel.unary_unary(method)
        try:
            call(payload, timeout=30, metadata=metadata)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def _both(servers: dict[str, RuntimeProcess], ask: Callable[[RuntimeProcess], Answer]) -> Answer:
    native, grpcio = ask(servers["native"]), ask(servers["grpcio"])
    assert native == grpcio
    return native


def test_infer_raw_fp32_and_requested_outputs(native: RuntimeProcess) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [2, 16], "FP32"), grpcclient.InferInput("INPUT1", [2, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    with native.grpc_client() as client:
        result = client.infer("add_sub", inputs, request_id="r-1", outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.as_numpy("OUTPUT0") is None
        assert result.get_response().id == "r-1"
        assert result.get_response().model_version == "1"
        full = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(full.as_numpy("OUTPUT0"), a + b)


def test_infer_typed_contents_and_parameters(native: RuntimeProcess) -> None:
    """Typed `contents` (no raw_input_contents), decoded by the core, and a request parameter of each kind."""
    request = pb.ModelInferRequest(model_name="add_sub", id="typed")
    for name, values in (("INPUT0", [float(i) for i in range(16)]), ("INPUT1", [2.0] * 16)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        tensor.contents.fp32_contents.extend(values)
    request.parameters["flag"].bool_param = True
    request.parameters["count"].int64_param = 3
    request.parameters["note"].string_param = "x"
    with grpc.insecure_channel(native.grpc_url) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert response.id == "typed"
    out = {o.name: np.frombuffer(raw, np.float32) for o, raw in zip(response.outputs, response.raw_output_contents,
                                                                     strict=True)}
    np.testing.assert_array_equal(out["OUTPUT0"], np.arange(16, dtype=np.float32) + 2)
    assert [list(o.shape) for o in response.outputs] == [[1, 16], [1, 16]]


@pytest.mark.parametrize("request_bytes", [
    pytest.param(_infer_request("no_such_model", [1, 16], bytes(64)).SerializeToString(), id="unknown-model"),
    pytest.param(_infer_request("add_sub", [1, 15], bytes(64)).SerializeToString(), id="bad-shape"),
    pytest.param(_infer_request("add_sub", [1, 16], bytes(60)).SerializeToString(), id="short-contents"),
    pytest.param(_infer_request("add_sub", [1, 16], bytes(64), model_version="x").SerializeToString(), id="bad-version"),
    pytest.param(b"\xff\xff\xff", id="undecodable"),
])
def test_infer_errors_as_grpcio_answers_them(servers: dict[str, RuntimeProcess], request_bytes: bytes) -> None:
    code, details = _both(servers, lambda p: _answer(p, "/inference.GRPCInferenceService/ModelInfer", request_bytes))
    assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAVAILABLE), details
    assert details


@pytest.mark.parametrize(("method", "request_bytes"), [
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub").SerializeToString()),
    ("ModelMetadata", pb.ModelMetadataRequest(name="no_such_model").SerializeToString()),
    ("ModelConfig", pb.ModelConfigRequest(name="add_sub").SerializeToString()),
    ("ModelReady", pb.ModelReadyRequest(name="add_sub", version="x").SerializeToString()),
    ("ServerMetadata", b"\xff\xff\xff"),
    ("TraceSetting", b""),
    ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="add_sub").SerializeToString()),
])
def test_forwarded_rpcs_as_grpcio_answers_them(servers: dict[str, RuntimeProcess], method: str,
                                               request_bytes: bytes) -> None:
    _both(servers, lambda p: _answer(p, f"/inference.GRPCInferenceService/{method}", request_bytes))


def test_forwarded_metadata_config_and_statistics(native: RuntimeProcess) -> None:
    with native.grpc_client() as client:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("add_sub")
        assert client.get_server_metadata().name == "ensemble-runtime"
        assert client.get_model_metadata("add_sub").platform == "onnxruntime_onnx"
        assert client.get_model_config("add_sub").config.max_batch_size == 8
        stats = client.get_inference_statistics("add_sub", headers={"triton-grpc-protocol-admin": "s3cret"})
        assert stats.model_stats[0].name == "add_sub"


def test_restricted_rpc_needs_its_header(servers: dict[str, RuntimeProcess]) -> None:
    method = "/inference.GRPCInferenceService/ModelStatistics"
    payload = pb.ModelStatisticsRequest(name="add_sub").SerializeToString()
    code, details = _both(servers, lambda p: _answer(p, method, payload))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert details == "This protocol is restricted, expecting header 'triton-grpc-protocol-admin'"
    wrong = (("triton-grpc-protocol-admin", "s3creT"),)
    assert _both(servers, lambda p: _answer(p, method, payload, wrong))[0] == grpc.StatusCode.UNAVAILABLE
    right = (("triton-grpc-protocol-admin", "s3cret"),)
    assert _both(servers, lambda p: _answer(p, method, payload, right)) == (grpc.StatusCode.OK, "")
    garbage_without_header = _both(servers, lambda p: _answer(p, method, b"\xff\xff\xff"))
    assert garbage_without_header[0] == grpc.StatusCode.UNAVAILABLE  # refused before the body is decoded


def test_oversized_message_refused_and_still_serving(servers: dict[str, RuntimeProcess]) -> None:
    huge = _infer_request("add_sub", [1, 16], bytes(LIMIT)).SerializeToString()
    code, details = _answer(servers["native"], "/inference.GRPCInferenceService/ModelInfer", huge)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("Received message larger than max (")
    assert _answer(servers["grpcio"], "/inference.GRPCInferenceService/ModelInfer", huge)[0] == code
    ok = _infer_request("add_sub", [1, 16], bytes(64)).SerializeToString()
    assert _answer(servers["native"], "/inference.GRPCInferenceService/ModelInfer", ok) == (grpc.StatusCode.OK, "")


def test_oversized_stream_message_refused_as_grpcio_refuses_it(servers: dict[str, RuntimeProcess]) -> None:
    """A ModelStreamInfer message over the limit ends the stream RESOURCE_EXHAUSTED (tonic says OUT_OF_RANGE;
    grpcio prefixes its message with "SERVER: "). Whether the answer to the request before it is out first is a
    race, under both."""
    small = _infer_request("add_sub", [1, 16], bytes(64), id="first").SerializeToString()
    huge = _infer_request("add_sub", [1, 16], bytes(LIMIT)).SerializeToString()
    ended: dict[str, tuple[grpc.StatusCode, str]] = {}
    for name, proc in servers.items():
        with grpc.insecure_channel(proc.grpc_url) as channel:
            try:
                list(channel.stream_stream(MODEL_STREAM_INFER)(iter([small, huge]), timeout=30))
            except grpc.RpcError as exc:
                ended[name] = (exc.code(), exc.details() or "")
    assert ended["native"][0] == ended["grpcio"][0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert ended["native"][1].startswith("Received message larger than max ("), ended["native"]
    ok = _infer_request("add_sub", [1, 16], bytes(64)).SerializeToString()
    assert _answer(servers["native"], "/inference.GRPCInferenceService/ModelInfer", ok) == (grpc.StatusCode.OK, "")


def test_health_check_follows_readiness(servers: dict[str, RuntimeProcess]) -> None:
    for proc in servers.values():
        with grpc.insecure_channel(proc.grpc_url) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "inference.GRPCInferenceService"):
                response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert response.status == health_pb2.HealthCheckResponse.SERVING
    _both(servers, lambda p: _answer(p, "/grpc.health.v1.Health/Check",
                                     health_pb2.HealthCheckRequest(service="nope").SerializeToString()))
    _both(servers, lambda p: _answer(p, "/grpc.health.v1.Health/Check", b"\xff\xff\xff"))



def test_only_grpcios_front_end_is_said_at_start_not_to_be_hardened(servers: dict[str, RuntimeProcess]) -> None:
    """grpcio's server has none of the native core's answers to HTTP/2's floods: the runtime says so when it
    serves with it, and not otherwise."""
    assert GRPCIO_UNHARDENED in servers["grpcio"].log_text()
    assert GRPCIO_UNHARDENED not in servers["native"].log_text()


def test_unknown_method_is_unimplemented(native: RuntimeProcess) -> None:
    code, _ = _answer(native, "/inference.GRPCInferenceService/NoSuchMethod", b"")
    assert code == grpc.StatusCode.UNIMPLEMENTED


def test_stream_infer_answers_each_request(servers: dict[str, RuntimeProcess]) -> None:
    """ModelStreamInfer: every request answered (by id), errors as stream messages, as grpcio answers them."""
    requests = [_infer_request("add_sub", [1, 16], np.full(16, i, np.float32).tobytes(), id=f"s-{i}") for i in range(5)]
    requests.append(_infer_request("no_such_model", [1, 16], bytes(64), id="bad"))
    answers: dict[str, dict[str, tuple[str, list[float]]]] = {}
    for name, proc in servers.items():
        with grpc.insecure_channel(proc.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answers[name] = {}
            for message in stub.ModelStreamInfer(iter(requests), timeout=30):
                response = message.infer_response
                first = np.frombuffer(response.raw_output_contents[0], np.float32).tolist() if response.outputs else []
                answers[name][response.id] = (message.error_message, first)
                assert response.parameters["triton_final_response"].bool_param
    assert answers["native"] == answers["grpcio"]
    assert answers["native"]["s-3"] == ("", [6.0] * 16)
    assert "unknown model" in answers["native"]["bad"][0]


def _types_request(request_id: str, requested: list[str] | None = None) -> pb.ModelInferRequest:
    """A request for `types` (fp16, int8, bool and BYTES through Identity), asking for `requested` outputs."""
    request = pb.ModelInferRequest(model_name="types", id=request_id)
    arrays: dict[str, npt.NDArray[Any]] = {
        "fp16_in": np.array([[1.5, -2]], np.float16), "int8_in": np.array([[-3, 4]], np.int8),
        "flag_in": np.array([[True, False]]),
    }
    for name, array in arrays.items():
        request.inputs.add(name=name, datatype={"f": "FP16", "i": "INT8", "b": "BOOL"}[array.dtype.kind],
                           shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
    request.inputs.add(name="text_in", datatype="BYTES", shape=[1, 2])
    request.raw_input_contents.append(serialize_bytes(np.array([[b"ab", b""]], dtype=np.object_)))
    for name in requested or []:
        request.outputs.add(name=name)
    return request


def test_stream_messages_as_grpcio_writes_them(servers: dict[str, RuntimeProcess]) -> None:
    """The native core decodes each frame and writes each response itself (Python's conversion where an output
    is BYTES), an ONNX model's from the loop, a python model's from its thread: every message the same as
    grpcio's, field for field."""
    plain = _infer_request("add_sub", [1, 16], np.arange(16, dtype=np.float32).tobytes(), id="plain")
    plain.parameters["triton_enable_empty_final_response"].bool_param = True  # read, and not passed on
    not_bool = _infer_request("add_sub", [1, 16], bytes(64), id="not-bool")
    not_bool.parameters["triton_enable_empty_final_response"].int64_param = 1
    with_params = _infer_request("add_sub", [1, 16], bytes(64), id="params")
    with_params.parameters["sequence_id"].int64_param = 0
    with_params.outputs.add(name="OUTPUT1")
    short = _infer_request("add_sub", [1, 16], bytes(60), id="short")
    python = _infer_request("py_add_sub", [4], np.arange(4, dtype=np.float32).tobytes(), id="python")  # its threads
    python_short = _infer_request("py_add_sub", [4], bytes(12), id="python-short")
    requests = [plain, not_bool, with_params, short, _types_request("numbers", ["fp16_out", "int8_out", "flag_out"]),
                _types_request("with-text"), _infer_request("no_such_model", [1, 16], bytes(64), id="unknown"),
                python, python_short]
    answers: dict[str, dict[str, pb.ModelStreamInferResponse]] = {}
    for name, proc in servers.items():
        with grpc.insecure_channel(proc.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            messages = list(stub.ModelStreamInfer(iter(requests), timeout=30))
        answers[name] = {message.infer_response.id: message for message in messages}
        assert len(answers[name]) == len(requests)
    assert answers["native"] == answers["grpcio"]
    native = answers["native"]
    assert [native[i].error_message == "" for i in ("plain", "params", "numbers", "with-text", "python")] == [True] * 5
    assert [o.name for o in native["python"].infer_response.outputs] == ["OUTPUT0", "OUTPUT1", "INFO"]
    assert "unexpected total byte size 12" in native["python-short"].error_message
    assert "triton_enable_empty_final_response" in native["not-bool"].error_message
    assert "unexpected total byte size 60" in native["short"].error_message
    assert [o.datatype for o in native["with-text"].infer_response.outputs] == ["FP16", "INT8", "BOOL", "BYTES"]


def test_stream_frame_that_does_not_decode_ends_the_stream(servers: dict[str, RuntimeProcess]) -> None:
    def ask(proc: RuntimeProcess) -> Answer:
        with grpc.insecure_channel(proc.grpc_url) as channel:
            stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
            try:
                list(stream(iter([b"\xff\xff\xff"]), timeout=30))
            except grpc.RpcError as exc:
                return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""

    native, grpcio = ask(servers["native"]), ask(servers["grpcio"])
    assert native[0] == grpcio[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "ModelStreamInfer request is not a valid protobuf message" in native[1]


def test_health_watch_streams_the_status(servers: dict[str, RuntimeProcess]) -> None:
    for proc in servers.values():
        with grpc.insecure_channel(proc.grpc_url) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            responses = stub.Watch(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"), timeout=30)
            # readiness may still be on its way to health (a test run alone): the watch says when it arrives
            assert any(r.status == health_pb2.HealthCheckResponse.SERVING for r in responses)
            responses.cancel()  # the server's watcher ends with the call
            unknown = stub.Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=30)
            assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            unknown.cancel()
        with proc.grpc_client() as client:
            assert client.is_server_live()


def test_health_watch_ends_when_the_server_stops(repository: Path) -> None:
    """A watcher does not hold the stop: its stream ends UNAVAILABLE as the server stops, not at the grace."""
    proc = RuntimeProcess([repository], ["--grpc-frontend=native", "--strict-readiness=false"]).start()
    try:
        proc.wait_ready()
        with grpc.insecure_channel(proc.grpc_url) as channel:
            responses = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
            # readiness may still be on its way to health: the watch says when it arrives
            assert any(r.status == health_pb2.HealthCheckResponse.SERVING for r in responses)
            proc.stop()
            with pytest.raises(grpc.RpcError) as ended:
                for _ in responses:  # NOT_SERVING may come first, while the server drains
                    pass
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert ended.value.details() == "the server is stopping"
    finally:
        proc.stop()
