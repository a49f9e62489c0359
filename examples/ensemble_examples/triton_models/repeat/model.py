"""`repeat_int32`, a decoupled model: one response per element of IN (OUT = [IN[i]], IDX = [i]), each after
DELAY[i] microseconds, then, WAIT[0] microseconds later, the final flag (the example repository of NVIDIA's
client examples; Triton's C++ `repeat` backend does the same)."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().reshape(-1)
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy().reshape(-1)
            for index, value in enumerate(values.tolist()):
                delay = int(delays[index]) if index < delays.size else 0
                time.sleep(delay / 1e6)
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                ]))
            time.sleep(int(wait[0]) / 1e6 if wait.size else 0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
