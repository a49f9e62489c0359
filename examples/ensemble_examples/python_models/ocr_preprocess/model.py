"""Decode one encoded image (PNG, JPEG, ...) into a grey [1, 1, H, W] tensor for the text detector.

Input `image_bytes` BYTES [1] -> outputs `image` FP32 [1, 1, H, W] (grey level / 255: 0 is ink, 1 is paper;
resized to H x W from the output's `dims` in config.pbtxt, aspect ratio not kept) and `image_size` INT32 [2]
(the original height and width, so later steps can give boxes in original pixels). Not batching
(max_batch_size 0): one image per request. Runs unchanged on Triton's python backend.
"""

import io
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        output = pb_utils.get_output_config_by_name(config, "image")
        self.dtype = pb_utils.triton_string_to_numpy(output["data_type"])
        self.shape = tuple(int(d) for d in output["dims"])
        if len(self.shape) != 4 or self.shape[:2] != (1, 1) or min(self.shape[2:]) < 1:
            raise pb_utils.TritonModelException(
                f"output 'image' must have dims [1, 1, H, W], config.pbtxt says {list(self.shape)}"
            )

    def execute(self, requests):
        return [self._preprocess(request) for request in requests]

    def _preprocess(self, request):
        encoded = pb_utils.get_input_tensor_by_name(request, "image_bytes").as_numpy().reshape(-1)
        if encoded.size != 1:
            error = pb_utils.TritonError(f"ocr_preprocess: expected one image per request, got {encoded.size}")
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        item = encoded[0]
        try:
            with Image.open(io.BytesIO(item if isinstance(item, bytes) else bytes(item))) as image:
                width, height = image.size
                grey = image.convert("L").resize((self.shape[3], self.shape[2]), Image.Resampling.BILINEAR)
        except (OSError, ValueError, UnidentifiedImageError) as exc:
            error = pb_utils.TritonError(f"ocr_preprocess: cannot decode image: {exc}")
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        pixels = np.asarray(grey, dtype=np.float32) / 255.0
        outputs = [
            pb_utils.Tensor("image", pixels.reshape(self.shape).astype(self.dtype)),
            pb_utils.Tensor("image_size", np.array([height, width], dtype=np.int32)),
        ]
        return pb_utils.InferenceResponse(output_tensors=outputs)
