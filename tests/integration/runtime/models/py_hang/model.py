import os
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """`initialize` hangs until the test creates HANG_MODEL_DIR/release (at most 5 minutes, so nothing leaks
    for ever); it writes HANG_MODEL_DIR/started-<n> first, so the test knows the load is in progress."""

    def initialize(self, args):
        directory = Path(os.environ["HANG_MODEL_DIR"])
        (directory / f"started-{time.monotonic_ns()}").write_text(args["model_instance_name"])
        deadline = time.monotonic() + 300
        while not (directory / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
