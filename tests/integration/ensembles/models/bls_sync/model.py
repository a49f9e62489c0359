# BLS from a synchronous execute: `InferenceRequest(...).exec()` on the model named by parameter `target`.
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.target = config["parameters"]["target"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name=self.target, requested_output_names=["Y"], inputs=[pb_utils.Tensor("X", x)]
            )
            answer = call.exec()
            if answer.has_error():
                error = pb_utils.TritonError(f"bls_sync: '{self.target}' failed: {answer.error().message()}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            y = pb_utils.get_output_tensor_by_name(answer, "Y").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y + 1)]))
        return responses
