"""A BLS (business logic scripting) model: route each request to one of several models.

Inputs `route` INT32 [1] and `X` FP32 [-1, 4] -> outputs `Y` FP32 [-1, 4] (the routed model's output) and
`model` BYTES [1] (its name). Parameter `routes` in config.pbtxt lists the models by route value
("model_a,model_b": route 0 calls model_a, route 1 calls model_b). Runs unchanged on Triton's python
backend.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.routes = config["parameters"]["routes"]["string_value"].split(",")

    def execute(self, requests):
        return [self._route(request) for request in requests]

    def _route(self, request):
        route = int(pb_utils.get_input_tensor_by_name(request, "route").as_numpy().reshape(-1)[0])
        if not 0 <= route < len(self.routes):
            error = pb_utils.TritonError(
                f"bls_router: route {route} is not one of 0..{len(self.routes) - 1} "
                f"({', '.join(self.routes)})"
            )
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        target = self.routes[route]
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        call = pb_utils.InferenceRequest(
            model_name=target, requested_output_names=["Y"], inputs=[pb_utils.Tensor("X", x)]
        )
        answer = call.exec()
        if answer.has_error():
            error = pb_utils.TritonError(f"bls_router: model '{target}' failed: {answer.error().message()}")
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        y = pb_utils.get_output_tensor_by_name(answer, "Y").as_numpy()
        outputs = [
            pb_utils.Tensor("Y", y),
            pb_utils.Tensor("model", np.array([target.encode()], dtype=np.object_)),
        ]
        return pb_utils.InferenceResponse(output_tensors=outputs)
