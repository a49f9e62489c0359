# BLS from an `async def execute`: `await InferenceRequest(...).async_exec()`, all requests concurrently.
import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.target = config["parameters"]["target"]["string_value"]

    async def execute(self, requests):
        return list(await asyncio.gather(*(self._one(request) for request in requests)))

    async def _one(self, request):
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        call = pb_utils.InferenceRequest(
            model_name=self.target, requested_output_names=["Y"], inputs=[pb_utils.Tensor("X", x)]
        )
        answer = await call.async_exec()
        if answer.has_error():
            error = pb_utils.TritonError(f"bls_async: '{self.target}' failed: {answer.error().message()}")
            return pb_utils.InferenceResponse(output_tensors=[], error=error)
        y = pb_utils.get_output_tensor_by_name(answer, "Y").as_numpy()
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y + 2)])
