"""The native core's ONNX lane, in this process: a real ONNX model served on the onnxruntime wheel's own C library,
called by tritonclient over gRPC. A request that matches the registered signature exactly is answered in the core
with what ONNX Runtime computes (nothing reaches Python); any other request reaches Python unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest
import pytest_asyncio
import tritonclient.grpc as grpcclient
from ensemble_examples import onnx_models
from ensemble_runtime.backends.ort_library import onnxruntime_library
from ensemble_runtime.protocol._native import Call, GrpcCore, OnnxLane
from ensemble_runtime.protocol.native_grpc import new_core
from ensemble_runtime.settings import GrpcConnections
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.asyncio
MODEL = "add_sub"
SIZE = onnx_models.ADD_SUB_SIZE
INPUTS = [("INPUT0", "FP32", [SIZE]), ("INPUT1", "FP32", [SIZE])]
OUTPUTS = [("OUTPUT0", "FP32", [SIZE]), ("OUTPUT1", "FP32", [SIZE])]
PYTHON_ANSWERS = "answered by Python"


@dataclass
class Served:
    core: GrpcCore
    lane: OnnxLane
    port: int
    model: Path
    library: Path
    reached_python: list[str] = field(default_factory=list)  # the model names of the ModelInfer calls Python got

    def client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(f"127.0.0.1:{self.port}")

    def serve(self, version: str = "1", max_batch_size: int = 8) -> None:
        self.lane.serve(MODEL, version, str(self.model), str(self.library), INPUTS, OUTPUTS, max_batch_size)


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    library = onnxruntime_library()
    assert library is not None, "the onnxruntime wheel ships its C library (capi/libonnxruntime.so.*)"
    model = tmp_path / "model.onnx"
    onnx_models.save(onnx_models.add_sub(), model)
    core = new_core(1 << 20, [], 1, GrpcConnections())
    port = core.start("127.0.0.1", 0)
    served = Served(core, core.onnx_lane(), port, model, library)

    def drain() -> None:
        for call in core.take():
            if isinstance(call, Call):
                if call.method.endswith("/ModelInfer"):
                    served.reached_python.append(call.request.model_name)
                call.fail(12, PYTHON_ANSWERS)

    loop = asyncio.get_running_loop()
    loop.add_reader(core.fileno(), drain)
    try:
        yield served
    finally:
        loop.remove_reader(core.fileno())
        await asyncio.to_thread(core.stop, 1.0)


def _inputs(batch: int | None, seed: int = 0) -> tuple[list[grpcclient.InferInput], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = [SIZE] if batch is None else [batch, SIZE]
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    inputs = []
    for (name, datatype, _), array in zip(INPUTS, reversed(arrays), strict=True):  # sent INPUT1 first: fed by name
        inputs.append(grpcclient.InferInput(name, list(array.shape), datatype))
        inputs[-1].set_data_from_numpy(array)
    return inputs, list(reversed(arrays))


def _infer(served: Served, inputs: list[grpcclient.InferInput], **kwargs: object) -> grpcclient.InferResult:
    with served.client() as client:
        return client.infer(MODEL, inputs, client_timeout=30, **kwargs)


def _reaches_python(served: Served, inputs: list[grpcclient.InferInput], **kwargs: object) -> None:
    before = len(served.reached_python)
    with pytest.raises(InferenceServerException, match=PYTHON_ANSWERS):
        _infer(served, inputs, **kwargs)
    assert served.reached_python[before:] == [MODEL]


def _session_run(served: Served, arrays: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(served.model), providers=["CPUExecutionProvider"])
    return list(session.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": arrays[0], "INPUT1": arrays[1]}))


async def test_a_plain_request_is_answered_in_the_core_as_onnxruntime_computes_it(served: Served) -> None:
    served.serve()
    inputs, arrays = _inputs(batch=3)
    result = await asyncio.to_thread(_infer, served, inputs, request_id="r7")
    expected = _session_run(served, arrays)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (MODEL, "1", "r7")
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    for name, want in zip(["OUTPUT0", "OUTPUT1"], expected, strict=True):
        got = result.as_numpy(name)
        assert got is not None and got.dtype == np.float32 and got.shape == (3, SIZE)
        np.testing.assert_array_equal(got, want)
    assert served.reached_python == []
    answered, compute_ns, passed = served.lane.counts(MODEL) or (0, 0, 0)
    assert (answered, passed) == (1, 0) and compute_ns > 0


async def test_perf_analyzers_request_is_answered_in_the_core(served: Served) -> None:
    """perf_analyzer sends `triton_enable_empty_final_response` with every request (tritonclient refuses to: it
    is reserved): it concerns a decoupled model's stream, so the lane answers such a request; another value
    type goes to Python."""
    served.serve()
    _, arrays = _inputs(batch=1, seed=2)
    request = pb.ModelInferRequest(model_name=MODEL)
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    for (name, datatype, _), array in zip(INPUTS, arrays, strict=True):
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    request.outputs.add(name="OUTPUT0")
    request.outputs.add(name="OUTPUT1")

    def infer(message: pb.ModelInferRequest) -> pb.ModelInferResponse:
        with grpc.insecure_channel(f"127.0.0.1:{served.port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            response: pb.ModelInferResponse = stub.ModelInfer(message, timeout=30)
            return response

    response = await asyncio.to_thread(infer, request)
    expected = _session_run(served, arrays)
    for raw, want in zip(response.raw_output_contents, expected, strict=True):
        np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(want.shape), want)
    assert served.reached_python == []
    request.parameters["triton_enable_empty_final_response"].int64_param = 1
    with pytest.raises(grpc.RpcError, match=PYTHON_ANSWERS):
        await asyncio.to_thread(infer, request)
    assert served.reached_python == [MODEL]


async def test_a_versions_first_requests_run_off_the_cores_thread_until_measured_short(served: Served) -> None:
    """The lane runs a version's first requests on a blocking thread (a slow model would hold every connection
    of the core's thread) and, once its runs average under 200 us, on the core's thread itself."""
    served.serve()
    inputs, arrays = _inputs(batch=1, seed=3)
    expected = _session_run(served, arrays)

    def requests(count: int) -> None:
        with served.client() as client:
            for _ in range(count):
                result = client.infer(MODEL, inputs, client_timeout=30)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])

    await asyncio.to_thread(requests, 10)
    assert served.lane.pooled(MODEL) == 10  # not yet measured short
    await asyncio.to_thread(requests, 190)
    pooled = served.lane.pooled(MODEL) or 0
    assert 10 < pooled < 200, pooled  # a 16-value add runs in microseconds: the later ones on the core's thread
    answered, _, passed = served.lane.counts(MODEL) or (0, 0, 0)
    assert (answered, passed) == (200, 0) and served.reached_python == []


async def test_the_outputs_asked_for_come_in_the_order_asked(served: Served) -> None:
    served.serve()
    inputs, arrays = _inputs(batch=1, seed=1)
    asked = [grpcclient.InferRequestedOutput("OUTPUT1"), grpcclient.InferRequestedOutput("OUTPUT0")]
    result = await asyncio.to_thread(_infer, served, inputs, outputs=asked)
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1", "OUTPUT0"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), arrays[0] - arrays[1])
    assert served.reached_python == []


async def test_what_does_not_match_the_signature_exactly_reaches_python(served: Served) -> None:
    served.serve()
    inputs, _ = _inputs(batch=9)  # over max_batch_size 8
    await asyncio.to_thread(_reaches_python, served, inputs)
    inputs, _ = _inputs(batch=None)  # a batching model's input without its batch dimension
    await asyncio.to_thread(_reaches_python, served, inputs)
    inputs, _ = _inputs(batch=1)
    await asyncio.to_thread(_reaches_python, served, inputs, parameters={"custom": 1})
    await asyncio.to_thread(_reaches_python, served, inputs, sequence_id=5, sequence_start=True)
    await asyncio.to_thread(_reaches_python, served, inputs[:1])
    await asyncio.to_thread(_reaches_python, served, inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT9")])
    await asyncio.to_thread(_reaches_python, served, inputs, model_version="2")
    wrong = grpcclient.InferInput("INPUT0", [1, SIZE], "INT32")
    wrong.set_data_from_numpy(np.zeros((1, SIZE), np.int32))
    await asyncio.to_thread(_reaches_python, served, [wrong, inputs[1]])
    answered, _, passed = served.lane.counts(MODEL) or (0, 0, 0)
    assert (answered, passed) == (0, 8)
    result = await asyncio.to_thread(_infer, served, inputs, model_version="1")
    assert result.get_response().model_version == "1"
    assert len(served.reached_python) == 8


async def test_a_shape_its_bytes_do_not_fill_allocates_nothing_in_the_core(served: Served) -> None:
    """A 64-byte input that declares 2^28 rows (a GiB of FP32 each) is not given to ONNX Runtime: the lane sizes
    nothing from a shape its bytes do not match, and Python answers it."""
    served.serve(max_batch_size=1 << 30)
    _, arrays = _inputs(batch=1)
    request = pb.ModelInferRequest(model_name=MODEL)
    for (name, datatype, _), array in zip(INPUTS, arrays, strict=True):
        request.inputs.add(name=name, datatype=datatype, shape=[1 << 28, SIZE])
        request.raw_input_contents.append(array.tobytes())

    def infer() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{served.port}") as channel:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)

    with pytest.raises(grpc.RpcError, match=PYTHON_ANSWERS):
        await asyncio.to_thread(infer)
    assert served.reached_python == [MODEL]
    answered, compute_ns, passed = served.lane.counts(MODEL) or (0, 0, 0)
    assert (answered, compute_ns, passed) == (0, 0, 1)


async def test_a_version_replaced_or_withdrawn_answers_no_more(served: Served) -> None:
    served.serve(version="1")
    inputs, _ = _inputs(batch=2)
    await asyncio.to_thread(_infer, served, inputs)
    served.serve(version="3")
    result = await asyncio.to_thread(_infer, served, inputs)
    assert result.get_response().model_version == "3"
    await asyncio.to_thread(_reaches_python, served, inputs, model_version="1")
    answered, _, passed = served.lane.counts(MODEL) or (0, 0, 0)
    assert (answered, passed) == (1, 1)  # the new version's own counts
    assert served.lane.withdraw(MODEL) and not served.lane.withdraw(MODEL)
    assert served.lane.counts(MODEL) is None
    await asyncio.to_thread(_reaches_python, served, inputs)


async def test_a_model_it_cannot_serve_is_refused_at_registration(served: Served, tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(ValueError, match="cannot load"):
        served.lane.serve(MODEL, "1", str(broken), str(served.library), INPUTS, OUTPUTS, 8)
    strings = [("INPUT0", "BYTES", [SIZE]), INPUTS[1]]
    with pytest.raises(ValueError, match="numeric tensors only"):
        served.lane.serve(MODEL, "1", str(served.model), str(served.library), strings, OUTPUTS, 8)
    unknown = [("INPUT7", "FP32", [SIZE]), INPUTS[1]]
    with pytest.raises(ValueError, match="not an input of the graph"):
        served.lane.serve(MODEL, "1", str(served.model), str(served.library), unknown, OUTPUTS, 8)
    assert served.lane.counts(MODEL) is None
    inputs, _ = _inputs(batch=1)
    await asyncio.to_thread(_reaches_python, served, inputs)
