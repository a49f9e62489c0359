"""Compare a score with a threshold.

Inputs `score` FP32 [1] and `threshold` FP32 [1] -> outputs `probability` FP32 [1] (the score clipped to
[0, 1]) and `verdict` BOOL [1] (probability >= threshold). Runs unchanged on Triton's python backend.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            score = pb_utils.get_input_tensor_by_name(request, "score").as_numpy()
            threshold = pb_utils.get_input_tensor_by_name(request, "threshold").as_numpy()
            if threshold.size not in (1, score.size):
                error = pb_utils.TritonError(
                    f"threshold: got {threshold.size} thresholds for {score.size} scores"
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            probability = np.clip(score, 0.0, 1.0).astype(np.float32)
            limit = threshold.reshape(-1)[0] if threshold.size == 1 else threshold.reshape(score.shape)
            verdict = probability >= limit
            outputs = [
                pb_utils.Tensor("probability", probability),
                pb_utils.Tensor("verdict", np.asarray(verdict, dtype=np.bool_).reshape(score.shape)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
