import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled: answers each request twice through its sender (X, then X + 100 with the final flag), with the
    order its execution started in and how many executions were running then."""

    def initialize(self, args):
        self.lock = threading.Lock()
        self.active = 0
        self.started = 0

    def execute(self, requests):
        with self.lock:
            self.active += 1
            self.started += 1
            order, active = self.started, self.active
        try:
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                sender = request.get_response_sender()
                for value, flags in ((x, 0), (x + 100, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)):
                    sender.send(pb_utils.InferenceResponse([
                        pb_utils.Tensor("X_OUT", value.astype(np.int32)),
                        pb_utils.Tensor("ORDER", np.array([order], dtype=np.int64)),
                        pb_utils.Tensor("ACTIVE", np.array([active], dtype=np.int64)),
                    ]), flags=flags)
            return None
        finally:
            with self.lock:
                self.active -= 1
