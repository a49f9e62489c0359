# Y = sqrt(X); raises for a negative X, so a step (or a BLS callee) fails for that request only.
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if float(x.reshape(-1)[0]) < 0:
                raise ValueError(f"py_check: negative input {float(x.reshape(-1)[0])} is not allowed")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", np.sqrt(x))]))
        return responses
