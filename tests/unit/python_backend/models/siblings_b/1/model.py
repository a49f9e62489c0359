import numpy as np
import triton_python_backend_utils as pb_utils

from . import helpers


class TritonPythonModel:
    def execute(self, requests):
        import helpers as absolute

        who = np.array([helpers.who(), absolute.who(), __name__], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WHO", who)]) for _ in requests]
