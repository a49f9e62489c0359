"""stream_pre: the preprocessing step of stream_pipeline: TOKENS = TEXT * 10, no delays."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            answers.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("TOKENS", (text * 10).astype(np.int32)),
                pb_utils.Tensor("DELAY", np.zeros(len(text), np.uint32)),
                pb_utils.Tensor("WAIT", np.zeros(1, np.uint32)),
            ]))
        return answers
