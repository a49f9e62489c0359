import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """`text_output` = `text_input` and the request's parameters (as the stub gives them) and id."""

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            said = text.decode() + " params=" + request.parameters() + " id=" + request.request_id()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([said], dtype=object))]))
        return responses
