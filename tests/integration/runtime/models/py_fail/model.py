import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if float(x.reshape(-1)[0]) < 0:
                raise ValueError("negative input is not allowed")
            if float(x.reshape(-1)[0]) == 0:
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("zero is refused"))
                )
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", np.sqrt(x))]))
        return responses
