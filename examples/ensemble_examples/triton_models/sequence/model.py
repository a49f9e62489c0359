"""`simple_sequence` and `simple_dyna_sequence`, stateless sequence models driven by the control inputs.

OUTPUT = INPUT, plus 1 on the request that starts a sequence (START), plus the correlation ID on the request
that ends it (END with a CORRID control input: the `dyna` model only). These are the values NVIDIA's sequence
examples expect from Triton's own `simple_sequence` / `simple_dyna_sequence` (the example repository of
NVIDIA's client examples).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _control(request, name, like):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return np.zeros_like(like, dtype=np.int64)
    return tensor.as_numpy().astype(np.int64).reshape(like.shape)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = value.astype(np.int64) + _control(request, "START", value)
            if pb_utils.get_input_tensor_by_name(request, "CORRID") is not None:
                out = out + _control(request, "END", value) * _control(request, "CORRID", value)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out.astype(value.dtype))]))
        return responses
