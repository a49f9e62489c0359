"""Small deterministic ONNX models built with `onnx.helper`: no downloads, fixed seeds, opset 17.

Every builder returns an `onnx.ModelProto` that passes `onnx.checker` and runs in onnxruntime. The first
dimension of every tensor is the batch (`-1` in Triton's terms, a symbolic `batch` dimension here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9  # onnxruntime >= 1.16 reads it; newer onnx releases would default to a higher one
PRODUCER = "ensemble_examples"

IMAGE_CHANNELS = 3
IMAGE_SIZE = 32
NUM_CLASSES = 10
CONV_CHANNELS = 8

SEQUENCE_LENGTH = 16
VOCABULARY_SIZE = 100  # id 0 is padding, words hash into 1..99
EMBEDDING_SIZE = 8

ADD_SUB_SIZE = 16
ROUTE_SIZE = 4  # width of `X`/`Y` for model_a, model_b, bls_router and versioned

CLASSIFIER_A_SEED = 1
CLASSIFIER_B_SEED = 2
TEXT_SCORER_SEED = 8

_BATCH = "batch"
_CALIBRATION_IMAGES = 64
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32).reshape(3, 1, 1)
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32).reshape(3, 1, 1)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER, ir_version=IR_VERSION
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _initializer(name: str, values: npt.NDArray[Any]) -> TensorProto:
    return numpy_helper.from_array(values, name=name)


def _weights(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> npt.NDArray[np.float32]:
    weights: npt.NDArray[np.float32] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return weights


def synthetic_image(size: tuple[int, int], seed: int) -> npt.NDArray[np.uint8]:
    """A deterministic RGB image (H, W, 3) uint8: a per-seed colour, waves and noise. Numpy only."""
    width, height = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(40.0, 215.0, size=3)
    frequency = rng.uniform(0.5, 4.0, size=(3, 2))
    waves = [
        base[c] + 60.0 * np.sin(2.0 * np.pi * (frequency[c, 0] * x / width + frequency[c, 1] * y / height))
        for c in range(3)
    ]
    pixels = np.stack(waves, axis=-1) + rng.normal(0.0, 12.0, size=(height, width, 3))
    image: npt.NDArray[np.uint8] = np.clip(pixels, 0, 255).astype(np.uint8)
    return image


def normalise(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """(H, W, 3) uint8 -> (3, H, W) float32 with CIFAR-10 channel statistics, as image_preprocess does."""
    chw = pixels.astype(np.float32).transpose(2, 0, 1) / 255.0
    normalised: npt.NDArray[np.float32] = ((chw - _CIFAR_MEAN) / _CIFAR_STD).astype(np.float32)
    return normalised


def classifier(seed: int = CLASSIFIER_A_SEED) -> onnx.ModelProto:
    """`image` FP32 [-1,3,32,32] -> Conv(8, 3x3) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(10).

    Output `logits` FP32 [-1,10]; `seed` picks the weights (classifier_a and classifier_b differ only there).
    Untrained, but not degenerate: the Gemm is folded with a standardisation of the pooled features, measured
    on `synthetic_image`s, so different images get different classes.
    """
    rng = np.random.default_rng(seed)
    conv_w = _weights(rng, (CONV_CHANNELS, IMAGE_CHANNELS, 3, 3), IMAGE_CHANNELS * 3 * 3)
    conv_b = (rng.standard_normal(CONV_CHANNELS) * 0.1).astype(np.float32)
    fc_w = _weights(rng, (CONV_CHANNELS, NUM_CLASSES), CONV_CHANNELS) * 2.0
    image = helper.make_tensor_value_info(
        "image", TensorProto.FLOAT, [_BATCH, IMAGE_CHANNELS, IMAGE_SIZE, IMAGE_SIZE]
    )
    features_nodes = [
        helper.make_node(
            "Conv", ["image", "conv_w", "conv_b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
    ]
    conv_initializers = [_initializer("conv_w", conv_w), _initializer("conv_b", conv_b)]
    features = _run_features(
        helper.make_graph(
            features_nodes,
            "features",
            [image],
            [helper.make_tensor_value_info("features", TensorProto.FLOAT, [_BATCH, CONV_CHANNELS])],
            conv_initializers,
        )
    )
    mean, std = features.mean(axis=0), features.std(axis=0) + 1e-3
    graph = helper.make_graph(
        [*features_nodes, helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"])],
        f"classifier_seed{seed}",
        [image],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_BATCH, NUM_CLASSES])],
        [
            *conv_initializers,
            _initializer("fc_w", (fc_w / std[:, np.newaxis]).astype(np.float32)),
            _initializer("fc_b", (-(mean / std) @ fc_w).astype(np.float32)),
        ],
    )
    return _model(graph)


def _run_features(graph: onnx.GraphProto) -> npt.NDArray[np.float32]:
    """Pooled features of the calibration images, computed with onnxruntime."""
    import onnxruntime  # only model building needs it, not importing this module

    images = np.stack(
        [normalise(synthetic_image((IMAGE_SIZE, IMAGE_SIZE), seed)) for seed in range(_CALIBRATION_IMAGES)]
    )
    session = onnxruntime.InferenceSession(
        _model(graph).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    features: npt.NDArray[np.float32] = session.run(["features"], {"image": images})[0]
    return features


def text_scorer(seed: int = TEXT_SCORER_SEED) -> onnx.ModelProto:
    """`token_ids` INT64 [-1,16] -> Gather(100x8) -> ReduceMean(tokens) -> Gemm(1) -> Sigmoid.

    Output `score` FP32 [-1,1] in (0, 1). Id 0 (padding) embeds to zeros.
    """
    rng = np.random.default_rng(seed)
    embedding = rng.standard_normal((VOCABULARY_SIZE, EMBEDDING_SIZE)).astype(np.float32)
    embedding[0] = 0.0  # padding contributes nothing but dilutes the mean
    initializers = [
        _initializer("embedding", embedding),
        _initializer("fc_w", _weights(rng, (EMBEDDING_SIZE, 1), EMBEDDING_SIZE) * 4.0),
        _initializer("fc_b", np.zeros(1, dtype=np.float32)),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "token_ids"], ["embedded"], axis=0),
        helper.make_node("ReduceMean", ["embedded"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Gemm", ["mean", "fc_w", "fc_b"], ["raw_score"]),
        helper.make_node("Sigmoid", ["raw_score"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "text_scorer",
        [helper.make_tensor_value_info("token_ids", TensorProto.INT64, [_BATCH, SEQUENCE_LENGTH])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [_BATCH, 1])],
        initializers,
    )
    return _model(graph)


def add_sub() -> onnx.ModelProto:
    """Triton's quickstart: `INPUT0`, `INPUT1` FP32 [-1,16] -> `OUTPUT0` = sum, `OUTPUT1` = difference."""
    shape: list[str | int] = [_BATCH, ADD_SUB_SIZE]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [
            helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("INPUT1", TensorProto.FLOAT, shape),
        ],
        [
            helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.FLOAT, shape),
        ],
    )
    return _model(graph)


def affine(scale: float, offset: float, name: str = "affine") -> onnx.ModelProto:
    """`X` FP32 [-1,4] -> `Y` = X * scale + offset (model_a and model_b behind the BLS router)."""
    shape: list[str | int] = [_BATCH, ROUTE_SIZE]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["X", "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "offset"], ["Y"]),
        ],
        name,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)],
        [
            _initializer("scale", np.array([scale], dtype=np.float32)),
            _initializer("offset", np.array([offset], dtype=np.float32)),
        ],
    )
    return _model(graph)


def versioned(version: int) -> onnx.ModelProto:
    """`X` FP32 [-1,4] -> `Y` = X + version and `version` INT32 [-1,1] filled with the version number.

    Rollover tests read `version` (or `Y - X`) to see which version of the model answered.
    """
    shape: list[str | int] = [_BATCH, ROUTE_SIZE]
    nodes = [
        helper.make_node("Add", ["X", "offset"], ["Y"]),
        helper.make_node("Shape", ["X"], ["x_shape"]),
        helper.make_node("Slice", ["x_shape", "zero", "one"], ["batch_dim"]),
        helper.make_node("Concat", ["batch_dim", "one"], ["version_shape"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["version_shape"],
            ["version"],
            value=helper.make_tensor("value", TensorProto.INT32, [1], [version]),
        ),
    ]
    graph = helper.make_graph(
        nodes,
        f"versioned_v{version}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("version", TensorProto.INT32, [_BATCH, 1]),
        ],
        [
            _initializer("offset", np.array([float(version)], dtype=np.float32)),
            _initializer("zero", np.array([0], dtype=np.int64)),
            _initializer("one", np.array([1], dtype=np.int64)),
        ],
    )
    return _model(graph)


def save(model: onnx.ModelProto, path: Path) -> None:
    """Write `model` to `path` (parents created, replaced atomically); the same model gives the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(model.SerializeToString(deterministic=True))
    partial.replace(path)
