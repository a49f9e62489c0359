import threading

import numpy as np
import triton_python_backend_utils as pb_utils

# All three instances must be inside execute at once to get past this: proves they run in parallel.
BARRIER = threading.Barrier(3, timeout=20)


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.kind = args["model_instance_kind"]

    def execute(self, requests):
        BARRIER.wait()
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor("INSTANCE", np.array([id(self)], dtype=np.int64)),
                    pb_utils.Tensor("NAME", np.array([self.name + "/" + self.kind], dtype=np.object_)),
                    pb_utils.Tensor("THREAD", np.array([threading.current_thread().name], dtype=np.object_)),
                ]
            )
            for _ in requests
        ]
