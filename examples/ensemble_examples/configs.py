"""The example models' `config.pbtxt` contents, as Triton `ModelConfig` messages. Pure.

Tensor names are lower-case except where a Triton example fixes them (`add_sub`'s INPUT0/OUTPUT0, the BLS
models' X/Y). Every model with `max_batch_size: 8` lists its dims without the batch dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_examples import ocr_models, onnx_models, segmentation_models

LABELS = tuple(str(digit) for digit in range(10))  # the classifiers read handwritten digits
MAX_BATCH_SIZE = 8
QUEUE_DELAY_MICROSECONDS = 500
TOP_K = 3
TOKENIZER_INSTANCES = 4
ROUTES = ("model_a", "model_b")

ONNX_PLATFORM = "onnxruntime_onnx"
ENSEMBLE_PLATFORM = "ensemble"
PYTHON_BACKEND = "python"
OCR_THRESHOLD = 0.5
OCR_MIN_PIXELS = 4


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


_MASK = Tensor("mask", mc.TYPE_INT64, (onnx_models.IMAGE_SIZE, onnx_models.IMAGE_SIZE))
_OCR_IMAGE = _fp32("image", 1, 1, ocr_models.OCR_IMAGE_HEIGHT, ocr_models.OCR_IMAGE_WIDTH)
_OCR_IMAGE_SIZE = Tensor("image_size", mc.TYPE_INT32, (2,))
_CROPS = _fp32("crops", -1, 1, ocr_models.CROP_HEIGHT, ocr_models.CROP_WIDTH)
_BOXES = Tensor("boxes", mc.TYPE_INT32, (-1, 4))
_CHAR_LOGITS = _fp32("logits", -1, ocr_models.TIME_STEPS, len(ocr_models.ALPHABET))


def segmenter() -> mc.ModelConfig:
    classes = len(segmentation_models.SEGMENT_CLASSES)
    size = onnx_models.IMAGE_SIZE
    return _onnx("segmenter", [_IMAGE], [_fp32("mask_logits", classes, size, size), _MASK], batcher=True)


def seg_pipeline() -> mc.ModelConfig:
    """One preprocess feeding a classifier and the segmenter in parallel."""
    return _ensemble(
        "seg_pipeline",
        [_IMAGE_BYTES],
        [_bytes("labels", -1), _MASK],
        [
            EnsembleStep("image_preprocess", {"image_bytes": "image_bytes"}, {"image": "preprocessed"}),
            EnsembleStep("classifier_a", {"image": "preprocessed"}, {"logits": "logits"}),
            EnsembleStep("image_postprocess", {"logits": "logits"}, {"labels": "labels"}),
            EnsembleStep("segmenter", {"image": "preprocessed"}, {"mask": "mask"}),
        ],
    )


def ocr_preprocess() -> mc.ModelConfig:
    return _config(
        "ocr_preprocess", [_IMAGE_BYTES], [_OCR_IMAGE, _OCR_IMAGE_SIZE], backend=PYTHON_BACKEND, max_batch_size=0
    )


def text_detector() -> mc.ModelConfig:
    heatmap = _fp32("heatmap", *_OCR_IMAGE.dims)
    return _config("text_detector", [_OCR_IMAGE], [heatmap], platform=ONNX_PLATFORM, max_batch_size=0)


def crop_boxes() -> mc.ModelConfig:
    return _config(
        "crop_boxes",
        [_fp32("heatmap", *_OCR_IMAGE.dims), _OCR_IMAGE, _OCR_IMAGE_SIZE],
        [_CROPS, _BOXES],
        backend=PYTHON_BACKEND,
        max_batch_size=0,
        parameters={
            "threshold": str(OCR_THRESHOLD),
            "min_pixels": str(OCR_MIN_PIXELS),
            "max_crops": str(ocr_models.MAX_CROPS),
        },
    )


def text_recognizer() -> mc.ModelConfig:
    return _config("text_recognizer", [_CROPS], [_CHAR_LOGITS], platform=ONNX_PLATFORM, max_batch_size=0)


def ctc_decode() -> mc.ModelConfig:
    return _config(
        "ctc_decode",
        [_CHAR_LOGITS],
        [_bytes("text", -1)],
        backend=PYTHON_BACKEND,
        max_batch_size=0,
        parameters={"alphabet": ocr_models.ALPHABET},
    )


def ocr_pipeline() -> mc.ModelConfig:
    """Five steps, one call; not batching, since the number of text regions varies per image."""
    config = _ensemble(
        "ocr_pipeline",
        [_IMAGE_BYTES],
        [_bytes("text", -1), _BOXES],
        [
            EnsembleStep(
                "ocr_preprocess", {"image_bytes": "image_bytes"}, {"image": "page", "image_size": "page_size"}
            ),
            EnsembleStep("text_detector", {"image": "page"}, {"heatmap": "heatmap"}),
            EnsembleStep(
                "crop_boxes",
                {"heatmap": "heatmap", "image": "page", "image_size": "page_size"},
                {"crops": "crops", "boxes": "boxes"},
            ),
            EnsembleStep("text_recognizer", {"crops": "crops"}, {"logits": "char_logits"}),
            EnsembleStep("ctc_decode", {"logits": "char_logits"}, {"text": "text"}),
        ],
    )
    config.max_batch_size = 0
    return config
