import os
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Marks the start of each execution in a file, then takes a second: a request surely in flight."""

    def execute(self, requests):
        marker = os.environ.get("SLOW_MODEL_MARKER")
        if marker:
            Path(marker).write_text("started")
        time.sleep(1.0)
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
