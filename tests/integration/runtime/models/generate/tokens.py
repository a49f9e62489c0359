import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled: `count` responses (3 when absent) `text_input#i`, then the final flag; a negative count is an
    error response. With `hold` true it waits, after its first response, until GENERATE_GATE_DIR/release exists
    (at most 60 s): a client must see that response before the model sends the next."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0].decode()
            count_tensor = pb_utils.get_input_tensor_by_name(request, "count")
            count = 3 if count_tensor is None else int(count_tensor.as_numpy().reshape(-1)[0])
            hold_tensor = pb_utils.get_input_tensor_by_name(request, "hold")
            hold = hold_tensor is not None and bool(hold_tensor.as_numpy().reshape(-1)[0])
            if count < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative count")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for i in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([f"{text}#{i}"], dtype=object))]))
                if hold and i == 0:
                    gate = Path(os.environ.get("GENERATE_GATE_DIR", "/nonexistent")) / "release"
                    deadline = time.monotonic() + 60
                    while not gate.exists() and time.monotonic() < deadline:
                        time.sleep(0.01)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
