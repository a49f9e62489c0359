"""stream_post: the postprocessing step of stream_pipeline, run once per token: WORD = TOKEN + 1."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            token = pb_utils.get_input_tensor_by_name(request, "TOKEN").as_numpy()
            answers.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("WORD", (token + 1).astype(np.int32)),
            ]))
        return answers
