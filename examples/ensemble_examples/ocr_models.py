"""The OCR example: a text detector and a CTC-style recognizer as ONNX models, and demo images of "words".

The pipeline (`ocr_pipeline`) is: `ocr_preprocess` (python: bytes -> grey [1,1,64,64] in [0, 1], 1 = paper)
-> `text_detector` (ONNX: heatmap of dark strokes) -> `crop_boxes` (python: one crop [1,16,64] and one box
per connected dark region) -> `text_recognizer` (ONNX: per-column class logits [16,37]) -> `ctc_decode`
(python: greedy CTC over `ALPHABET`). Nothing is trained: the detector is a fixed blur-and-threshold and the
recognizer has seeded random weights, so the strings are stable but mean nothing; the boxes do mean something.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import TensorProto, helper

from ensemble_examples.onnx_models import _initializer, _model, _weights  # package-internal builders

OCR_IMAGE_SIZE = 64  # ocr_preprocess resizes every image to 64x64 (aspect ratio not kept)
CROP_HEIGHT = 16
CROP_WIDTH = 64
TIME_STEPS = 16  # recognizer columns: CROP_WIDTH / 4
ALPHABET = "-0123456789abcdefghijklmnopqrstuvwxyz"  # index 0 ('-') is the CTC blank
MAX_CROPS = 16
DETECTOR_GAIN = 12.0  # heat = sigmoid(gain * (3x3 mean of the ink - 0.5)), ink = 1 - grey
RECOGNIZER_SEED = 32  # picked so the demo words decode to different strings
RECOGNIZER_CHANNELS = 8

DEMO_SIZE = (256, 128)  # width, height of `demo_image`
# Where `demo_image` draws its words (left, top, right, bottom in DEMO_SIZE pixels), in reading order.
WORD_SLOTS = (
    (16, 14, 112, 42),
    (144, 14, 240, 42),
    (16, 78, 176, 106),
    (200, 78, 240, 106),
)

_CROPS = "crops"


def text_detector(gain: float = DETECTOR_GAIN) -> onnx.ModelProto:
    """`image` FP32 [1,1,64,64] -> ink = 1 - image -> Conv(3x3 mean) -> Sigmoid -> `heatmap` FP32 [1,1,64,64].

    heat = sigmoid(gain * (3x3 mean of ink - 0.5)): dark pixels (ink, near 0) give heat near 1, paper (near 1)
    heat near 0; the zero padding is blank paper, so the borders stay cold. The 3x3 mean closes one-pixel gaps
    between strokes, so a word comes out as one blob.
    """
    shape = [1, 1, OCR_IMAGE_SIZE, OCR_IMAGE_SIZE]
    weights = np.full((1, 1, 3, 3), gain / 9.0, dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "image"], ["ink"]),
            helper.make_node("Conv", ["ink", "conv_w", "conv_b"], ["raw"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Sigmoid", ["raw"], ["heatmap"]),
        ],
        "text_detector",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("heatmap", TensorProto.FLOAT, shape)],
        [
            _initializer("one", np.ones(1, dtype=np.float32)),
            _initializer("conv_w", weights),
            _initializer("conv_b", np.array([-gain * 0.5], dtype=np.float32)),
        ],
    )
    return _model(graph)


def text_recognizer(seed: int = RECOGNIZER_SEED) -> onnx.ModelProto:
    """`crops` FP32 [-1,1,16,64] -> Conv(8, 3x3) -> Relu -> AveragePool(16x4) -> Conv(37, 1x1) per column.

    Output `logits` FP32 [-1,16,37]: one row of class scores per 4-pixel column, class 0 the CTC blank. Zero
    crops give [0,16,37] (a MatMul here would not: onnxruntime's fused MatMul refuses an empty batch).
    """
    rng = np.random.default_rng(seed)
    classes = len(ALPHABET)
    pool_width = CROP_WIDTH // TIME_STEPS
    channels = RECOGNIZER_CHANNELS
    nodes = [
        helper.make_node("Conv", [_CROPS, "conv_w", "conv_b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node(
            "AveragePool",
            ["relu"],
            ["pooled"],
            kernel_shape=[CROP_HEIGHT, pool_width],
            strides=[CROP_HEIGHT, pool_width],
        ),
        helper.make_node("Conv", ["pooled", "fc_w", "fc_b"], ["scores"], kernel_shape=[1, 1]),
        helper.make_node("Squeeze", ["scores", "height_axis"], ["columns"]),
        helper.make_node("Transpose", ["columns"], ["logits"], perm=[0, 2, 1]),
    ]
    initializers = [
        _initializer("conv_w", _weights(rng, (channels, 1, 3, 3), 9) * 4.0),
        _initializer("conv_b", (rng.standard_normal(channels) * 0.5).astype(np.float32)),
        _initializer("height_axis", np.array([2], dtype=np.int64)),
        _initializer("fc_w", (_weights(rng, (channels, classes), channels) * 16.0).T.reshape(classes, channels, 1, 1)),
        _initializer("fc_b", (rng.standard_normal(classes) * 2.0).astype(np.float32)),
    ]
    graph = helper.make_graph(
        nodes,
        "text_recognizer",
        [helper.make_tensor_value_info(_CROPS, TensorProto.FLOAT, [_CROPS, 1, CROP_HEIGHT, CROP_WIDTH])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_CROPS, TIME_STEPS, classes])],
        initializers,
    )
    return _model(graph)


def demo_image(words: int = 3) -> bytes:
    """PNG bytes of a white DEMO_SIZE page with `words` (0..4) dark "words", one per `WORD_SLOTS` entry.

    A word is a row of strokes of different heights standing on a shared baseline (so it is one connected
    dark region), like letters on a line; `text_detector` + `crop_boxes` find exactly one box per word.
    """
    from PIL import Image, ImageDraw  # Pillow: only the image helpers need it

    if not 0 <= words <= len(WORD_SLOTS):
        raise ValueError(f"demo_image draws 0..{len(WORD_SLOTS)} words, not {words}")
    image = Image.new("L", DEMO_SIZE, 255)
    draw = ImageDraw.Draw(image)
    for index, (left, top, right, bottom) in enumerate(WORD_SLOTS[:words]):
        baseline = bottom - 4
        draw.rectangle((left, baseline, right - 1, bottom - 1), fill=20)
        for stroke, x in enumerate(range(left, right - 5, 10)):
            height = (bottom - top) * (0.45 + 0.55 * ((index * 5 + stroke * 3) % 7) / 6)
            draw.rectangle((x, int(bottom - height), x + 5, baseline), fill=20)
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()
