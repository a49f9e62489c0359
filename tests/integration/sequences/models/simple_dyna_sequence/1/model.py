"""simple_dyna_sequence: OUTPUT = INPUT + START, plus CORRID on the request that ends the sequence."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _get(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value, start, end, ready = _get(request, "INPUT"), _get(request, "START"), _get(request, "END"), _get(request, "READY")
            corrid = _get(request, "CORRID").astype(np.int64)
            out = value.astype(np.int64) + start + end * corrid
            out = np.where(ready != 0, out, 0).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return responses
