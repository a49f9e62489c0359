"""repeat_int32, as Triton's client examples expect it (decoupled): one response per element of IN, the i-th
after DELAY[i] milliseconds, with OUT = IN[i] and IDX = i, then the final flag alone. `execute` returns
after WAIT milliseconds, so one instance serves several requests at once and their responses interleave."""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("repeat_int32 must be decoupled")
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().copy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            thread = threading.Thread(target=self.respond, args=(request.get_response_sender(), values, delays),
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
            time.sleep(float(wait[0]) / 1000.0)
        return None

    def respond(self, sender, values, delays):
        for index, value in enumerate(values):
            time.sleep(float(delays[index]) / 1000.0 if index < len(delays) else 0.0)
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=10)
