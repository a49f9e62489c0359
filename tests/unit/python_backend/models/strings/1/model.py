import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            assert text.dtype == np.object_
            upper = np.array([[s.decode().upper() for s in row] for row in text])  # str: encoded for us
            length = np.array([[len(s) for s in row] for row in text], dtype=np.int32)
            params = np.array([request.parameters() + "|" + request.request_id()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("UPPER", upper),
                        pb_utils.Tensor("LENGTH", length),
                        pb_utils.Tensor("PARAMS", params),
                    ]
                )
            )
        return responses
