"""The example models' `config.pbtxt` contents, as Triton `ModelConfig` messages. Pure.

Tensor names are lower-case except where a Triton example fixes them (`add_sub`'s INPUT0/OUTPUT0, the BLS
models' X/Y). Every model with `max_batch_size: 8` lists its dims without the batch dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_examples import onnx_models

LABELS = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
MAX_BATCH_SIZE = 8
QUEUE_DELAY_MICROSECONDS = 500
TOP_K = 3
TOKENIZER_INSTANCES = 4
ROUTES = ("model_a", "model_b")

ONNX_PLATFORM = "onnxruntime_onnx"
ENSEMBLE_PLATFORM = "ensemble"
PYTHON_BACKEND = "python"


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    data_type: int  # model_config_pb2.DataType value
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    model_name: str
    input_map: Mapping[str, str]  # step model input -> ensemble tensor
    output_map: Mapping[str, str]  # step model output -> ensemble tensor


def _fp32(name: str, *dims: int) -> Tensor:
    return Tensor(name, mc.TYPE_FP32, dims)


def _bytes(name: str, *dims: int) -> Tensor:
    return Tensor(name, mc.TYPE_STRING, dims)


_IMAGE = _fp32("image", onnx_models.IMAGE_CHANNELS, onnx_models.IMAGE_SIZE, onnx_models.IMAGE_SIZE)
_LOGITS = _fp32("logits", onnx_models.NUM_CLASSES)
_IMAGE_BYTES = _bytes("image_bytes", 1)


def _config(
    name: str,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    *,
    platform: str = "",
    backend: str = "",
    max_batch_size: int = MAX_BATCH_SIZE,
    parameters: Mapping[str, str] | None = None,
) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform=platform, backend=backend, max_batch_size=max_batch_size)
    for tensor in inputs:
        config.input.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    for tensor in outputs:
        config.output.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    for key, value in (parameters or {}).items():
        config.parameters[key].string_value = value
    return config


def _onnx(name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor], *, batcher: bool) -> mc.ModelConfig:
    config = _config(name, inputs, outputs, platform=ONNX_PLATFORM)
    if batcher:
        config.dynamic_batching.max_queue_delay_microseconds = QUEUE_DELAY_MICROSECONDS
    return config


def _ensemble(
    name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor], steps: Sequence[EnsembleStep]
) -> mc.ModelConfig:
    config = _config(name, inputs, outputs, platform=ENSEMBLE_PLATFORM)
    for step in steps:
        raw = config.ensemble_scheduling.step.add(model_name=step.model_name, model_version=-1)
        raw.input_map.update(step.input_map)
        raw.output_map.update(step.output_map)
    return config


def classifier(name: str) -> mc.ModelConfig:
    return _onnx(name, [_IMAGE], [_LOGITS], batcher=True)


def text_scorer() -> mc.ModelConfig:
    tokens = Tensor("token_ids", mc.TYPE_INT64, (onnx_models.SEQUENCE_LENGTH,))
    return _onnx("text_scorer", [tokens], [_fp32("score", 1)], batcher=False)


def add_sub() -> mc.ModelConfig:
    size = onnx_models.ADD_SUB_SIZE
    return _onnx(
        "add_sub",
        [_fp32("INPUT0", size), _fp32("INPUT1", size)],
        [_fp32("OUTPUT0", size), _fp32("OUTPUT1", size)],
        batcher=False,
    )


def affine(name: str) -> mc.ModelConfig:
    size = onnx_models.ROUTE_SIZE
    return _onnx(name, [_fp32("X", size)], [_fp32("Y", size)], batcher=False)


def versioned() -> mc.ModelConfig:
    size = onnx_models.ROUTE_SIZE
    version = Tensor("version", mc.TYPE_INT32, (1,))
    return _onnx("versioned", [_fp32("X", size)], [_fp32("Y", size), version], batcher=False)


def image_preprocess() -> mc.ModelConfig:
    return _config("image_preprocess", [_IMAGE_BYTES], [_IMAGE], backend=PYTHON_BACKEND)


def image_postprocess() -> mc.ModelConfig:
    return _config(
        "image_postprocess",
        [_LOGITS],
        [_bytes("labels", -1)],
        backend=PYTHON_BACKEND,
        parameters={"top_k": str(TOP_K), "labels": ",".join(LABELS)},
    )


def combine_argmax() -> mc.ModelConfig:
    return _config(
        "combine_argmax",
        [_fp32("logits_a", onnx_models.NUM_CLASSES), _fp32("logits_b", onnx_models.NUM_CLASSES)],
        [Tensor("class_id", mc.TYPE_INT64, (1,)), _bytes("label", 1)],
        backend=PYTHON_BACKEND,
        parameters={"labels": ",".join(LABELS)},
    )


def tokenizer() -> mc.ModelConfig:
    config = _config(
        "tokenizer",
        [_bytes("text", 1)],
        [Tensor("token_ids", mc.TYPE_INT64, (onnx_models.SEQUENCE_LENGTH,))],
        backend=PYTHON_BACKEND,
        parameters={"vocabulary_size": str(onnx_models.VOCABULARY_SIZE)},
    )
    config.instance_group.add(count=TOKENIZER_INSTANCES, kind=mc.ModelInstanceGroup.KIND_CPU)
    return config


def threshold() -> mc.ModelConfig:
    return _config(
        "threshold",
        [_fp32("score", 1), _fp32("threshold", 1)],
        [_fp32("probability", 1), Tensor("verdict", mc.TYPE_BOOL, (1,))],
        backend=PYTHON_BACKEND,
    )


def bls_router() -> mc.ModelConfig:
    """Not batching: `route` applies to the whole request, whose `X` may hold several rows."""
    size = onnx_models.ROUTE_SIZE
    return _config(
        "bls_router",
        [Tensor("route", mc.TYPE_INT32, (1,)), _fp32("X", -1, size)],
        [_fp32("Y", -1, size), _bytes("model", 1)],
        backend=PYTHON_BACKEND,
        max_batch_size=0,
        parameters={"routes": ",".join(ROUTES)},
    )


def image_pipeline() -> mc.ModelConfig:
    return _ensemble(
        "image_pipeline",
        [_IMAGE_BYTES],
        [_bytes("labels", -1)],
        [
            EnsembleStep("image_preprocess", {"image_bytes": "image_bytes"}, {"image": "preprocessed"}),
            EnsembleStep("classifier_a", {"image": "preprocessed"}, {"logits": "logits"}),
            EnsembleStep("image_postprocess", {"logits": "logits"}, {"labels": "labels"}),
        ],
    )


def dual_classifier() -> mc.ModelConfig:
    return _ensemble(
        "dual_classifier",
        [_IMAGE_BYTES],
        [Tensor("class_id", mc.TYPE_INT64, (1,)), _bytes("label", 1)],
        [
            EnsembleStep("image_preprocess", {"image_bytes": "image_bytes"}, {"image": "preprocessed"}),
            EnsembleStep("classifier_a", {"image": "preprocessed"}, {"logits": "logits_a"}),
            EnsembleStep("classifier_b", {"image": "preprocessed"}, {"logits": "logits_b"}),
            EnsembleStep(
                "combine_argmax",
                {"logits_a": "logits_a", "logits_b": "logits_b"},
                {"class_id": "class_id", "label": "label"},
            ),
        ],
    )


def text_pipeline() -> mc.ModelConfig:
    return _ensemble(
        "text_pipeline",
        [_bytes("text", 1), _fp32("threshold", 1)],
        [_fp32("probability", 1), Tensor("verdict", mc.TYPE_BOOL, (1,))],
        [
            EnsembleStep("tokenizer", {"text": "text"}, {"token_ids": "token_ids"}),
            EnsembleStep("text_scorer", {"token_ids": "token_ids"}, {"score": "score"}),
            EnsembleStep(
                "threshold",
                {"score": "score", "threshold": "threshold"},
                {"probability": "probability", "verdict": "verdict"},
            ),
        ],
    )
