# A Python model that tries to end the process: `how.txt` next to it says where ("import", "initialize",
# "execute", "async_execute", "finalize"; "ok" for none) and how ("exit": sys.exit(3), "interrupt":
# KeyboardInterrupt, "base": a BaseException subclass, "os_exit": os._exit(1)). It answers Y = X + version.
import os
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WHERE, _, HOW = Path(__file__).with_name("how.txt").read_text().strip().partition(":")


class ModelEnded(BaseException):
    pass


def die():
    if HOW == "exit":
        sys.exit(3)
    if HOW == "interrupt":
        raise KeyboardInterrupt
    if HOW == "base":
        raise ModelEnded("model code raised a BaseException")
    if HOW == "os_exit":
        os._exit(1)


if WHERE == "import":
    die()


def answer(self, requests):
    if WHERE in ("execute", "async_execute"):
        die()
    responses = []
    for request in requests:
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        y = (x + self.version).astype(np.float32)
        responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
    return responses


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])
        if WHERE == "initialize":
            die()

    if WHERE == "async_execute":

        async def execute(self, requests):
            return answer(self, requests)

    else:

        def execute(self, requests):
            return answer(self, requests)

    def finalize(self):
        if WHERE == "finalize":
            die()
