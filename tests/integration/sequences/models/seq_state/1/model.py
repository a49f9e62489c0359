"""seq_state: OUTPUT = ACC_OUT = ACC_IN + INPUT (the runtime keeps ACC between requests of a sequence)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            kept = pb_utils.get_input_tensor_by_name(request, "ACC_IN").as_numpy()
            total = (kept + value).astype(np.int32)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("ACC_OUT", total)])
            )
        return responses
