import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "add_sub")
            bls_request = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUTPUT0"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            )
            bls_response = bls_request.exec()
            if bls_response.has_error():
                error = bls_response.error()
                forwarded = pb_utils.TritonError(error.message(), error.code())
                responses.append(pb_utils.InferenceResponse(error=forwarded))
                continue
            total = pb_utils.get_output_tensor_by_name(bls_response, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total.as_numpy())]))
        return responses
