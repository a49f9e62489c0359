"""seq_oldest: BATCH = the number of requests in this execute call, STARTED = the START control (bool)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        count = np.full((1, 1), len(requests), np.int32)
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("BATCH", count),
                pb_utils.Tensor("STARTED", pb_utils.get_input_tensor_by_name(r, "START").as_numpy().astype(bool)),
            ])
            for r in requests
        ]
