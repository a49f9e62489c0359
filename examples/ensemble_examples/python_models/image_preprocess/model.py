"""Decode encoded images (PNG, JPEG, ...) and turn them into normalised CHW float tensors.

Input `image_bytes` BYTES [1] (one encoded image per batch row) -> output `image` FP32 [3, H, W], where H and
W come from the output's `dims` in config.pbtxt. Runs unchanged on Triton's python backend.
"""

import io
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

# CIFAR-10 channel statistics
MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32).reshape(3, 1, 1)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        output = pb_utils.get_output_config_by_name(config, "image")
        self.dtype = pb_utils.triton_string_to_numpy(output["data_type"])
        channels, height, width = (int(d) for d in output["dims"])
        if channels != 3:
            raise pb_utils.TritonModelException(
                f"output 'image' must have 3 channels, config.pbtxt says {channels}"
            )
        self.size = (width, height)

    def execute(self, requests):
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "image_bytes").as_numpy()
            try:
                images = np.stack([self._decode(item) for item in encoded.reshape(-1)])
            except (OSError, ValueError, UnidentifiedImageError) as exc:
                error = pb_utils.TritonError(f"image_preprocess: cannot decode image: {exc}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            images = images.reshape((*encoded.shape[:-1], *images.shape[1:]))
            tensor = pb_utils.Tensor("image", images.astype(self.dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses

    def _decode(self, item):
        data = item if isinstance(item, bytes) else bytes(item)
        with Image.open(io.BytesIO(data)) as image:
            rgb = image.convert("RGB").resize(self.size, Image.Resampling.BILINEAR)
        pixels = np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return (pixels - MEAN) / STD
