"""NVIDIA's image classification examples and the classification extension, against ours and the real Triton:
grpc_image_client (raw gRPC stub: sync, -a, --streaming) and image_client (tritonclient gRPC and HTTP: sync,
-a, --streaming), both with -c, on `densenet_onnx` (DenseNet's tensors, a 1000-line label file).

As in the examples: model metadata and config are checked to describe an image classifier, the images are
preprocessed as they do (PIL, bilinear resize to the model's H x W, NCHW), each output is requested with a
class count, and each answer must be `value:index:label` strings. Beyond the examples, every string is compared
with what the model's scores give (Triton's format: `std::to_string` of the value, the index, the label).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.model_config_pb2 as mc
import tritonclient.http as httpclient
from ensemble_examples.triton_repository import CLASSES, labels
from PIL import Image
from tritonclient import utils
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.integration.triton_examples.support import serve, simple_data, simple_inputs
from tests.support.server_process import ServerProcess

MODELS = ("densenet_onnx", "simple")
MODEL = "densenet_onnx"
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A folder of two images (the examples take a file or a folder, sorted by name)."""
    folder = tmp_path_factory.mktemp("images")
    paths = []
    for index, size in enumerate(((320, 240), (100, 150))):
        ramp = np.add.outer(np.arange(size[1]), np.arange(size[0])) * (index + 1) % 256
        rgb = np.stack([ramp, ramp[::-1], np.full_like(ramp, 40 * index)], axis=-1).astype(np.uint8)
        path = folder / f"image{index}.png"
        Image.fromarray(rgb).save(path)
        paths.append(path)
    return sorted(paths)


def _parse_model(metadata: Any, config: Any) -> tuple[int, str, str, int, int, int, int, str]:
    """The checks of the examples' parse_model: one input, one FP32 vector output, a CHW or HWC image input."""
    assert len(metadata.inputs) == 1 and len(metadata.outputs) == 1 and len(config.input) == 1
    input_metadata, input_config, output_metadata = metadata.inputs[0], config.input[0], metadata.outputs[0]
    assert output_metadata.datatype == "FP32"
    batched = config.max_batch_size > 0
    dims = list(output_metadata.shape)[1 if batched else 0:]
    assert sum(1 for d in dims if d > 1) <= 1, "expecting model output to be a vector"
    assert len(input_metadata.shape) == 3 + (1 if batched else 0)
    assert input_config.format in (mc.ModelInput.FORMAT_NCHW, mc.ModelInput.FORMAT_NHWC)
    shape = list(input_metadata.shape)[1 if batched else 0:]
    if input_config.format == mc.ModelInput.FORMAT_NHWC:
        h, w, c = shape
    else:
        c, h, w = shape
    return (config.max_batch_size, input_metadata.name, output_metadata.name, c, h, w, input_config.format,
            input_metadata.datatype)


def _preprocess(path: Path, image_format: int, c: int, h: int, w: int) -> npt.NDArray[np.float32]:
    """As the examples do with scaling NONE."""
    with Image.open(path) as img:
        sample = img.convert("L" if c == 1 else "RGB")
    resized = np.array(sample.resize((w, h), Image.Resampling.BILINEAR))
    if resized.ndim == 2:
        resized = resized[:, :, np.newaxis]
    typed = resized.astype(np.float32)
    return np.transpose(typed, (2, 0, 1)) if image_format == mc.ModelInput.FORMAT_NCHW else typed


def _expected(image: npt.NDArray[np.float32], count: int) -> list[str]:
    """The classes the example model gives `image`, as Triton formats them: value:index:label, best first."""
    key = int(np.abs(image.astype(np.float64)).sum()) % CLASSES
    scores = (((np.arange(CLASSES) + key) * 7) % CLASSES).astype(np.float32) / np.float32(CLASSES)
    order = sorted(range(CLASSES), key=lambda i: (-scores[i], i))[:count]
    names = labels()
    return [f"{float(scores[i]):f}:{i}:{names[i]}" for i in order]


def _check_classes(results: Any, image: npt.NDArray[np.float32], count: int) -> None:
    """The examples' postprocess (each result splits into value, index and label) and the exact strings."""
    texts = []
    for result in results:
        text = "".join(chr(x) for x in result) if isinstance(result, bytes) else str(result)
        value, index, label = text.split(":")
        assert float(value) >= 0 and int(index) >= 0 and label, text
        texts.append(text)
    assert texts == _expected(image, count)


def _grpc_requests(names: tuple[str, str, str], c: int, h: int, w: int, image_format: int, datatype: str,
                   data: list[npt.NDArray[np.float32]], classes: int) -> Iterator[service_pb2.ModelInferRequest]:
    """grpc_image_client's requestGenerator for a non-batching model: one request per image."""
    model, input_name, output_name = names
    for image in data:
        request = service_pb2.ModelInferRequest(model_name=model, model_version="")
        output = request.outputs.add(name=output_name)
        output.parameters["classification"].int64_param = classes
        tensor = request.inputs.add(name=input_name, datatype=datatype)
        tensor.shape.extend([h, w, c] if image_format == mc.ModelInput.FORMAT_NHWC else [c, h, w])
        request.raw_input_contents.append(image.tobytes())
        yield request


@pytest.mark.parametrize("mode", ["sync", "async", "streaming"])
@pytest.mark.parametrize("classes", [1, 3])
def test_grpc_image_client(server: ServerProcess, images: list[Path], mode: str, classes: int) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        metadata = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=MODEL, version=""))
        config = stub.ModelConfig(service_pb2.ModelConfigRequest(name=MODEL, version="")).config
        max_batch_size, input_name, output_name, c, h, w, image_format, datatype = _parse_model(metadata, config)
        assert max_batch_size == 0
        data = [_preprocess(path, image_format, c, h, w) for path in images]
        requests = _grpc_requests((MODEL, input_name, output_name), c, h, w, image_format, datatype, data, classes)
        if mode == "streaming":
            answers = list(stub.ModelStreamInfer(requests, timeout=DEADLINE_S))
            assert all(a.error_message == "" for a in answers), answers
            responses = [a.infer_response for a in answers]
        elif mode == "async":
            responses = [f.result(timeout=DEADLINE_S) for f in [stub.ModelInfer.future(r) for r in requests]]
        else:
            responses = [stub.ModelInfer(r) for r in requests]
    assert len(responses) == len(data)
    for response, image in zip(responses, data, strict=True):
        assert len(response.outputs) == 1 and len(response.raw_output_contents) == 1
        contents = np.reshape(utils.deserialize_bytes_tensor(response.raw_output_contents[0]),
                              list(response.outputs[0].shape))
        assert response.outputs[0].datatype == "BYTES" and list(response.outputs[0].shape) == [classes]
        _check_classes(contents, image, classes)


@pytest.mark.parametrize(("protocol", "mode"), [("grpc", "sync"), ("grpc", "async"), ("grpc", "streaming"),
                                                ("http", "sync"), ("http", "async")])
def test_image_client(server: ServerProcess, images: list[Path], protocol: str, mode: str) -> None:
    """image_client -i <protocol> [-a | --streaming] -c 3 <folder>."""
    classes = 3
    module: Any = grpcclient if protocol == "grpc" else httpclient
    client: Any = (grpcclient.InferenceServerClient(server.grpc_url) if protocol == "grpc"
                   else httpclient.InferenceServerClient(server.http_url, concurrency=20 if mode == "async" else 1))
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    try:
        metadata, config = client.get_model_metadata(MODEL, ""), client.get_model_config(MODEL, "")
        if protocol == "grpc":
            parsed = _parse_model(metadata, config.config)
        else:  # the example wraps the JSON in attribute dicts; the same fields, read as JSON
            parsed = _parse_model(_Attrs(metadata), _Attrs({**config, "input": [
                _Attrs({**i, "format": mc.ModelInput.Format.Value(i["format"])}) for i in config["input"]]}))
        _, input_name, output_name, c, h, w, image_format, datatype = parsed
        data = [_preprocess(path, image_format, c, h, w) for path in images]
        if mode == "streaming":
            client.start_stream(partial(lambda q, result, error: q.put((result, error)), done))
        results, pending = [], []
        for sent, image in enumerate(data, start=1):
            inputs = [module.InferInput(input_name, list(image.shape), datatype)]
            inputs[0].set_data_from_numpy(image)
            outputs = [module.InferRequestedOutput(output_name, class_count=classes)]
            if mode == "streaming":
                client.async_stream_infer(MODEL, inputs, request_id=str(sent), model_version="", outputs=outputs)
            elif mode == "async" and protocol == "grpc":
                client.async_infer(MODEL, inputs, partial(lambda q, result, error: q.put((result, error)), done),
                                   request_id=str(sent), model_version="", outputs=outputs)
            elif mode == "async":
                pending.append(client.async_infer(MODEL, inputs, request_id=str(sent), model_version="",
                                                  outputs=outputs))
            else:
                results.append(client.infer(MODEL, inputs, request_id=str(sent), model_version="", outputs=outputs))
        if mode == "streaming" or (mode == "async" and protocol == "grpc"):
            answers = [done.get(timeout=DEADLINE_S) for _ in data]
            assert all(error is None for _, error in answers), answers
            results = sorted((result for result, _ in answers), key=lambda r: int(r.get_response(as_json=True)["id"]))
        elif mode == "async":
            results = [request.get_result() for request in pending]
    finally:
        if mode == "streaming":
            client.stop_stream()
        client.close()
    for result, image in zip(results, data, strict=True):
        _check_classes(result.as_numpy(output_name), image, classes)


class _Attrs(dict[str, Any]):
    """JSON objects read by attribute, as the example's AttrDict reads them."""

    def __getattr__(self, name: str) -> Any:
        value = self[name]
        if isinstance(value, dict):
            return _Attrs(value)
        if isinstance(value, list):
            return [_Attrs(v) if isinstance(v, dict) else v for v in value]
        return value


def test_any_pixels_get_scores(server: ServerProcess) -> None:
    """perf_analyzer's default data for `densenet_onnx` is random bits, NaNs and infinities among them. The model
    answers such an image as it answers any (there: as an all-zero image), as DenseNet would; before, the stand-in
    failed it with `cannot convert float NaN to integer` (and an infinity with an OverflowError)."""
    with server.grpc_client() as client:
        def scores(image: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
            tensor = grpcclient.InferInput("data_0", list(image.shape), "FP32")
            tensor.set_data_from_numpy(image)
            out: npt.NDArray[np.float32] | None = client.infer(MODEL, [tensor]).as_numpy("fc6_1")
            assert out is not None and out.shape == (CLASSES,)
            return out

        zero = scores(np.zeros((3, 224, 224), np.float32))
        for odd in (np.nan, np.inf, -np.inf):
            image = np.ones((3, 224, 224), np.float32)
            image[1, 2:, 7] = odd
            np.testing.assert_array_equal(scores(image), zero)
        assert not np.array_equal(scores(np.ones((3, 224, 224), np.float32)), zero)  # a finite image keys its own


# ---- the classification extension beyond the examples: batches, JSON, refusals -----------------------

@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("binary", [True, False])
def test_classification_is_per_batch_entry(server: ServerProcess, protocol: str, binary: bool) -> None:
    """`simple` batches: a batch of 2 gives [2, k] strings `value:index` (no label file), largest first; a class
    count above the element count gives them all; JSON (binary_data false) carries the same strings."""
    module: Any = grpcclient if protocol == "grpc" else httpclient
    client: Any = server.grpc_client() if protocol == "grpc" else server.http_client()
    in0, in1 = (np.concatenate([d, d + 16]) for d in simple_data())
    try:
        for count, width in ((3, 3), (40, 16)):
            kwargs = {"class_count": count} if protocol == "grpc" else {"class_count": count, "binary_data": binary}
            result = client.infer("simple", simple_inputs(module, in0, in1),
                                  outputs=[module.InferRequestedOutput("OUTPUT0", **kwargs),
                                           module.InferRequestedOutput("OUTPUT1")])
            got = result.as_numpy("OUTPUT0")
            assert got.shape == (2, width), got
            sums = in0 + in1
            for row in range(2):
                expected = [f"{sums[row][i]}:{i}" for i in sorted(range(16), key=lambda i: -sums[row][i])[:width]]
                assert [x.decode() if isinstance(x, bytes) else x for x in got[row]] == expected
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), in0 - in1)  # not classified
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_classification_refusals_ours(servers: dict[str, ServerProcess], protocol: str) -> None:
    """A negative class count is INVALID_ARGUMENT naming the parameter, and the server serves on. (Ours only:
    what tritonserver 2.51 does with it is not documented, and it crashes on a classified BYTES output, the
    other refusal, which tests/unit/runtime/test_classification.py covers.)"""
    server = servers["ours"]
    module: Any = grpcclient if protocol == "grpc" else httpclient
    client: Any = server.grpc_client() if protocol == "grpc" else server.http_client()
    invalid = "StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400"
    image = np.zeros((3, 224, 224), np.float32)
    try:
        inputs = [module.InferInput("data_0", [3, 224, 224], "FP32")]
        inputs[0].set_data_from_numpy(image)
        with pytest.raises(InferenceServerException) as refused:
            client.infer(MODEL, inputs, outputs=[module.InferRequestedOutput("fc6_1", class_count=-2)])
        assert refused.value.status() == invalid and "'classification' parameter" in refused.value.message()
        result = client.infer(MODEL, inputs, outputs=[module.InferRequestedOutput("fc6_1", class_count=2)])
        assert [x.decode() for x in result.as_numpy("fc6_1")] == _expected(image, 2)
    finally:
        client.close()
