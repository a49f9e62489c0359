"""The OCR example: a text detector and a trained digit-string recognizer as ONNX models.

The pipeline (`ocr_pipeline`) is: `ocr_preprocess` (python: bytes -> grey [1,1,96,288] in [0, 1], 1 = paper)
-> `text_detector` (ONNX: heatmap of dark strokes, widened a little) -> `crop_boxes` (python: one crop
[1,16,96] and one box per connected dark region, the region scaled to the crop's height, paper to its right)
-> `text_recognizer` (ONNX: class logits per 4-pixel step [24,11]) -> `ctc_decode` (python: greedy CTC over
`ALPHABET`). The detector is a fixed blur, widen and threshold; the recognizer is a per-step classifier
trained on strings of training digits (`ocr_training`), so it reads the digit strings of `ocr_pages`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from ensemble_examples import ocr_pages
from ensemble_examples.onnx_models import _initializer, _model  # package-internal builders

OCR_IMAGE_WIDTH, OCR_IMAGE_HEIGHT = ocr_pages.PAGE_SIZE  # ocr_preprocess resizes every image to this
CROP_HEIGHT = 16
CROP_WIDTH = 96  # a 5-digit word scaled to CROP_HEIGHT is about 70 pixels wide
STEP = 4  # crop columns per recognizer time step
TIME_STEPS = CROP_WIDTH // STEP
WINDOW = 16  # each step's classifier sees CROP_HEIGHT x WINDOW pixels centred on the step
ALPHABET = "-0123456789"  # index 0 ('-') is the CTC blank
MAX_CROPS = 16
DETECTOR_GAIN = 24.0  # heat = sigmoid(gain * (widened 3x3 mean of the ink - level)), ink = 1 - grey
DETECTOR_LEVEL = 0.25  # faint strokes count: paper has no ink at all
DETECTOR_WIDEN = 5  # the 3x3 mean's maximum over a 5x5 square: closes gaps of up to 4 pixels in a stroke

_CROPS = "crops"


@dataclass(frozen=True, slots=True)
class RecognizerWeights:
    """A one-hidden-layer classifier of one step's window (its ink, row by row):
    hidden = relu(window . hidden_w + hidden_b), logits = hidden . out_w + out_b."""

    hidden_w: npt.NDArray[np.float32]  # [hidden, 1, CROP_HEIGHT, WINDOW]: the window's ink, row by row
    hidden_b: npt.NDArray[np.float32]  # [hidden]
    out_w: npt.NDArray[np.float32]  # [classes, hidden, 1, 1]
    out_b: npt.NDArray[np.float32]  # [classes]


def text_detector(gain: float = DETECTOR_GAIN) -> onnx.ModelProto:
    """`image` FP32 [1,1,H,W] -> ink = 1 - image -> Conv(3x3 mean) -> MaxPool(5x5) -> Sigmoid -> `heatmap`.

    heat = sigmoid(gain * (max over 5x5 of the 3x3 mean of ink - DETECTOR_LEVEL)): strokes, faint ones included,
    and what lies within 2 pixels of them get heat near 1, paper heat near 0; the zero padding is blank paper,
    so the borders stay cold. Widening joins a digit's broken strokes and the digits to their underline: one
    blob per word.
    """
    shape = [1, 1, OCR_IMAGE_HEIGHT, OCR_IMAGE_WIDTH]
    weights = np.full((1, 1, 3, 3), 1.0 / 9.0, dtype=np.float32)
    half = DETECTOR_WIDEN // 2
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "image"], ["ink"]),
            helper.make_node("Conv", ["ink", "mean_w"], ["mean"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("MaxPool", ["mean"], ["widened"], kernel_shape=[DETECTOR_WIDEN] * 2, pads=[half] * 4),
            helper.make_node("Sub", ["widened", "level"], ["centred"]),
            helper.make_node("Mul", ["centred", "gain"], ["raw"]),
            helper.make_node("Sigmoid", ["raw"], ["heatmap"]),
        ],
        "text_detector",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("heatmap", TensorProto.FLOAT, shape)],
        [
            _initializer("one", np.ones(1, dtype=np.float32)),
            _initializer("mean_w", weights),
            _initializer("level", np.array([DETECTOR_LEVEL], dtype=np.float32)),
            _initializer("gain", np.array([gain], dtype=np.float32)),
        ],
    )
    return _model(graph)


def recognizer_model(weights: RecognizerWeights) -> onnx.ModelProto:
    """`crops` FP32 [-1,1,16,96] -> ink = 1 - crops -> Conv(hidden, 16x16 window, stride 4) -> Relu ->
    Conv(classes, 1x1) -> `logits` FP32 [-1,24,11]: one row of class scores per step, class 0 the CTC blank.

    The first Conv is the classifier's hidden layer applied to every step's window (zero padding is paper);
    the second its output layer. Zero crops give [0,24,11].
    """
    classes = len(ALPHABET)
    pad = (WINDOW - STEP) // 2
    nodes = [
        helper.make_node("Sub", ["one", _CROPS], ["ink"]),
        helper.make_node(
            "Conv",
            ["ink", "hidden_w", "hidden_b"],
            ["hidden"],
            kernel_shape=[CROP_HEIGHT, WINDOW],
            strides=[CROP_HEIGHT, STEP],
            pads=[0, pad, 0, pad],
        ),
        helper.make_node("Relu", ["hidden"], ["active"]),
        helper.make_node("Conv", ["active", "out_w", "out_b"], ["scores"], kernel_shape=[1, 1]),
        helper.make_node("Squeeze", ["scores", "height_axis"], ["columns"]),
        helper.make_node("Transpose", ["columns"], ["logits"], perm=[0, 2, 1]),
    ]
    initializers = [
        _initializer("one", np.ones(1, dtype=np.float32)),
        _initializer("hidden_w", weights.hidden_w),
        _initializer("hidden_b", weights.hidden_b),
        _initializer("out_w", weights.out_w),
        _initializer("out_b", weights.out_b),
        _initializer("height_axis", np.array([2], dtype=np.int64)),
    ]
    graph = helper.make_graph(
        nodes,
        "text_recognizer",
        [helper.make_tensor_value_info(_CROPS, TensorProto.FLOAT, [_CROPS, 1, CROP_HEIGHT, CROP_WIDTH])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_CROPS, TIME_STEPS, classes])],
        initializers,
    )
    return _model(graph)


def text_recognizer() -> onnx.ModelProto:
    """The recognizer trained on strings of training digits (trained once per process)."""
    from ensemble_examples.ocr_training import trained_recognizer  # training imports this module's geometry

    return recognizer_model(trained_recognizer())
