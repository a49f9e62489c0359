# Triton puts the version directory on sys.path and imports this file as `1.model`:
# both absolute and relative imports of sibling files work there.
import helpers
import numpy as np
import triton_python_backend_utils as pb_utils

from .sub.deep import VALUE


class TritonPythonModel:
    def execute(self, requests):
        import helpers as lazily  # imported again at call time, as some models do

        who = np.array([helpers.who(), VALUE, lazily.who()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WHO", who)]) for _ in requests]
