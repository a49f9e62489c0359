"""The segmentation example: a per-pixel colour classifier as an ONNX model, and a demo image for it.

`segmenter` takes the same normalised image as the classifiers (`image_preprocess`'s output), so one
preprocess step can feed both a classifier and the segmenter in `seg_pipeline`.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import TensorProto, helper

from ensemble_examples import onnx_models
from ensemble_examples.onnx_models import _initializer, _model  # package-internal builders

SEGMENT_CLASSES = ("background", "red", "green", "blue")
BACKGROUND_LOGIT = 1.0  # a pixel is a colour only when that channel clearly dominates the other two

_BATCH = "batch"


def segmenter() -> onnx.ModelProto:
    """`image` FP32 [-1,3,32,32] -> 1x1 Conv(4) -> `mask_logits` FP32 [-1,4,32,32] -> ArgMax(classes).

    Outputs `mask_logits` and `mask` INT64 [-1,32,32] (the class of each pixel).
    Fixed weights, no randomness: class 0 (background) has a constant logit, classes 1..3 score how much
    their channel (R, G, B of the normalised image) exceeds the other two, so a saturated red, green or blue
    area gets that class and grey, white or black areas stay background.
    """
    classes = len(SEGMENT_CLASSES)
    channels, size = onnx_models.IMAGE_CHANNELS, onnx_models.IMAGE_SIZE
    weights = np.zeros((classes, channels, 1, 1), dtype=np.float32)
    for channel in range(channels):
        weights[1 + channel, :, 0, 0] = -1.0
        weights[1 + channel, channel, 0, 0] = 2.0
    bias = np.zeros(classes, dtype=np.float32)
    bias[0] = BACKGROUND_LOGIT
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["mask_logits"], kernel_shape=[1, 1]),
        helper.make_node("ArgMax", ["mask_logits"], ["mask"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "segmenter",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [_BATCH, channels, size, size])],
        [
            helper.make_tensor_value_info("mask_logits", TensorProto.FLOAT, [_BATCH, classes, size, size]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [_BATCH, size, size]),
        ],
        [_initializer("conv_w", weights), _initializer("conv_b", bias)],
    )
    return _model(graph)


def demo_image(size: tuple[int, int] = (64, 64)) -> bytes:
    """PNG bytes (width, height = `size`): grey background with a red, a green and a blue rectangle.

    Each rectangle covers at least a sixth of the image, so all four classes show up in the mask.
    """
    from PIL import Image, ImageDraw  # Pillow: only the image helpers need it

    width, height = size
    image = Image.new("RGB", size, (128, 128, 128))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width // 2 - 1, height // 2 - 1), fill=(230, 20, 20))
    draw.rectangle((width // 2, 0, width - 1, height // 2 - 1), fill=(20, 200, 20))
    draw.rectangle((0, height * 2 // 3, width * 2 // 3 - 1, height - 1), fill=(20, 20, 230))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
