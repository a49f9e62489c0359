"""Triton python model: `Y` = `X` + 1 (FP32). A benchmark step that does almost nothing, so what a chain of
them costs is the server's scheduling. Runs unchanged on Triton's python backend and ours."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.one = np.float32(1.0)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = pb_utils.Tensor("Y", (x + self.one).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
