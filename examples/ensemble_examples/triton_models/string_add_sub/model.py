"""`simple_string`: INPUT0 and INPUT1 hold integers written as UTF-8 text; OUTPUT0 is their sum and OUTPUT1
their difference, written the same way (the example repository of NVIDIA's client examples)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _integers(tensor):
    return np.vectorize(lambda item: int(item.decode("utf-8") if isinstance(item, bytes) else item),
                        otypes=[np.int64])(tensor.as_numpy())


def _text(values):
    return np.vectorize(lambda value: str(value).encode("utf-8"), otypes=[np.object_])(values)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = _integers(pb_utils.get_input_tensor_by_name(request, "INPUT0"))
            in1 = _integers(pb_utils.get_input_tensor_by_name(request, "INPUT1"))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", _text(in0 + in1)), pb_utils.Tensor("OUTPUT1", _text(in0 - in1)),
            ]))
        return responses
