import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Echoes X with the order its execution started in and how many executions were running then; a request
    with a `gate` parameter (a file path) is held until that file exists. `finalize` writes how many
    executions had finished to <model repository>/finalized."""

    def initialize(self, args):
        self.lock = threading.Lock()
        self.active = 0
        self.started = 0
        self.finished = 0
        self.repository = Path(args["model_repository"])

    def execute(self, requests):
        with self.lock:
            self.active += 1
            self.started += 1
            order, active = self.started, self.active
        try:
            responses = []
            for request in requests:
                gate = json.loads(request.parameters() or "{}").get("gate")
                deadline = time.monotonic() + 60
                while gate and not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.001)
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("X_OUT", x),
                    pb_utils.Tensor("ORDER", np.array([order], dtype=np.int64)),
                    pb_utils.Tensor("ACTIVE", np.array([active], dtype=np.int64)),
                ]))
            return responses
        finally:
            with self.lock:
                self.active -= 1
                self.finished += 1

    def finalize(self):
        (self.repository / "finalized").write_text(str(self.finished))
