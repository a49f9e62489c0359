# The `simple_string` model Triton's client examples expect: 16 strings holding integers per input; outputs
# are their sum and difference, as strings. Runs unchanged on Triton and on the runtime.
import numpy as np
import triton_python_backend_utils as pb_utils


def _ints(tensor):
    return np.array([int(v) for v in tensor.as_numpy().reshape(-1)], dtype=np.int64).reshape(tensor.as_numpy().shape)


def _strings(values):
    return np.array([str(v).encode() for v in values.reshape(-1)], dtype=np.object_).reshape(values.shape)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = _ints(pb_utils.get_input_tensor_by_name(request, "INPUT0"))
            b = _ints(pb_utils.get_input_tensor_by_name(request, "INPUT1"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", _strings(a + b)),
                pb_utils.Tensor("OUTPUT1", _strings(a - b)),
            ]))
        return responses
