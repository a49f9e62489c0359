import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Echoes X with the order its execution started in and how many executions were running then; a request
    with a `gate` parameter (a file path) is held until that file exists. Decoupled (when its config says so),
    it answers each request twice through its sender: that response, then X + 100 with the final flag.
    `finalize` writes how many executions this instance had finished, and the thread it ran on, to
    <model repository>/finalized-<instance name>; counts are per instance."""

    def initialize(self, args):
        self.lock = threading.Lock()
        self.active = 0
        self.started = 0
        self.finished = 0
        self.repository = Path(args["model_repository"])
        self.instance = args["model_instance_name"]
        self.thread = threading.current_thread().name
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

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
                answers = [self._response(x, order, active)]
                if self.decoupled:
                    sender = request.get_response_sender()
                    sender.send(answers[0])
                    sender.send(self._response(x + 100, order, active),
                                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                responses.extend(answers)
            return None if self.decoupled else responses
        finally:
            with self.lock:
                self.active -= 1
                self.finished += 1

    @staticmethod
    def _response(x, order, active):
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("X_OUT", x.astype(np.int32)),
            pb_utils.Tensor("ORDER", np.array([order], dtype=np.int64)),
            pb_utils.Tensor("ACTIVE", np.array([active], dtype=np.int64)),
        ])

    def finalize(self):
        same = threading.current_thread().name == self.thread
        (self.repository / f"finalized-{self.instance}").write_text(f"{self.finished} {same}")
