import os
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """`execute` writes HELD_MODEL_DIR/started, then waits until the test creates HELD_MODEL_DIR/release (at most
    60 s, so nothing waits for ever): a request surely in flight for as long as the test needs."""

    def execute(self, requests):
        directory = Path(os.environ["HELD_MODEL_DIR"])
        (directory / "started").write_text("")
        deadline = time.monotonic() + 60
        while not (directory / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
