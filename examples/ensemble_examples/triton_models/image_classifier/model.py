"""`densenet_onnx` of the example repository: a stand-in image classifier with DenseNet's signature.

Input `data_0` FP32 [3, 224, 224] (NCHW), output `fc6_1` FP32 [1000] with a label file, as in Triton's
`densenet_onnx`, so NVIDIA's image clients run unchanged. The scores are no real classification: they are a
permutation of 0.000 .. 0.999 keyed by the image's pixel sum (0 where the sum is not finite: perf_analyzer's
random data has NaNs and infinities among its bits), exact in float32 and the same on any machine, so two servers
can be compared string for string.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

CLASSES = 1000


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        classes = np.arange(CLASSES, dtype=np.int64)
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "data_0").as_numpy()
            images = image.reshape((-1, *image.shape[-3:]))
            scores = []
            for one in images:
                total = np.abs(one.astype(np.float64)).sum()
                key = int(total) % CLASSES if np.isfinite(total) else 0  # random bits: NaN, infinities
                scores.append((((classes + key) * 7) % CLASSES).astype(np.float32) / np.float32(CLASSES))
            out = np.stack(scores).reshape((*image.shape[:-3], CLASSES))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("fc6_1", out)]))
        return responses
