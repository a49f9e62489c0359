"""repeat_fails (decoupled): one response per element of IN until a negative element; there `execute` raises,
mid-stream, after the responses already sent. A request without negatives ends normally."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for value in pb_utils.get_input_tensor_by_name(request, "IN").as_numpy():
                if value < 0:
                    raise pb_utils.TritonModelException(f"negative element {int(value)}")
                sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([value], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
