import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        name = threading.current_thread().name
        return [pb_utils.InferenceResponse([pb_utils.Tensor("THREAD", np.array([name], dtype=np.object_))]) for _ in requests]
