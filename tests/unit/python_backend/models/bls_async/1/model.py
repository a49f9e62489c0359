import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        bls_requests = []
        for request in requests:
            if json.loads(request.parameters()).get("mode") == "sync_exec":
                pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=["OUTPUT0"]).exec()
            bls_requests.append(
                pb_utils.InferenceRequest(
                    model_name="add_sub",
                    requested_output_names=["OUTPUT0"],
                    inputs=[
                        pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                    ],
                )
            )
        bls_responses = await asyncio.gather(*(r.async_exec() for r in bls_requests))
        responses = []
        for bls_response in bls_responses:
            if bls_response.has_error():
                responses.append(pb_utils.InferenceResponse(error=bls_response.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(bls_response, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total.as_numpy())]))
        return responses
