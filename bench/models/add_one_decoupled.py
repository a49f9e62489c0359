"""Triton python model, decoupled: answers each request with one response, `Y` = `X` + 1 (FP32), then the final
flag alone, through the request's response sender (the shape of a streaming model that sends one chunk). Runs
unchanged on Triton's python backend and ours."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.one = np.float32(1.0)

    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", (x + self.one).astype(np.float32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
