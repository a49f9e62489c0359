"""square_int32 (decoupled): for IN = n, n responses each with OUT = n, sent from execute itself, the last one
carrying the final flag; IN = 0 sends the final flag alone (zero responses)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if n <= 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for index in range(n):
                response = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([n], np.int32))])
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index == n - 1 else 0
                sender.send(response, flags=flags)
        return None
