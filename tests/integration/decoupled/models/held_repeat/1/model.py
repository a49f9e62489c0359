"""held_repeat (decoupled), for tests that change the server while a stream is open: one response per element
of IN; after the first it holds the rest until the file named by the config parameter RELEASE_FILE exists
(at most 60 s; without the parameter it does not hold)."""

import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.release = parameters.get("RELEASE_FILE", {}).get("string_value", "")

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            threading.Thread(target=self.respond, args=(request.get_response_sender(), values), daemon=True).start()
        return None

    def respond(self, sender, values):
        for index, value in enumerate(values):
            if index == 1 and self.release:
                deadline = time.monotonic() + 60
                while not os.path.exists(self.release) and time.monotonic() < deadline:
                    time.sleep(0.01)
            sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([value], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
