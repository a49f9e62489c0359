import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        modes = [json.loads(r.parameters()).get("mode", "ok") for r in requests]
        if "raise" in modes:
            raise ValueError("cannot handle this batch")
        if "wrong_count" in modes:
            return []
        if "none" in modes:
            return None
        responses = []
        for request, mode in zip(requests, modes, strict=True):
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if mode == "error_response":
                error = pb_utils.TritonError("X must be positive", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            elif mode == "error_default":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("something broke")))
            elif mode == "wrong_dtype":
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.astype(np.float64))]))
            elif mode == "missing_output":
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
            else:
                outputs = [pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("Z", x * 3)]
                responses.append(pb_utils.InferenceResponse(outputs))
        return responses
