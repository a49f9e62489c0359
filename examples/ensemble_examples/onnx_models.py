"""Small deterministic ONNX models built with `onnx.helper`: no downloads, fixed seeds, opset 17.

The trained ones live beside it: `digit_classifiers` (classifier_a, classifier_b) and `text_model`
(text_scorer); this module holds the shared builders, sizes and the untrained models.

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

SEQUENCE_LENGTH = 16
VOCABULARY_SIZE = 1024  # id 0 is padding, words hash into 1..1023 (few collisions among the corpus' words)

ADD_SUB_SIZE = 16
ROUTE_SIZE = 4  # width of `X`/`Y` for model_a, model_b, bls_router and versioned

_BATCH = "batch"
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
