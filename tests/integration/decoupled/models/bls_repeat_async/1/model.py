"""bls_repeat_async: bls_repeat with `async def execute` and `await async_exec(decoupled=True)`, two calls in
flight at once (the second on the reversed input); OUT and IDX hold the first call's values then the
second's, RESPONSES counts both calls' responses."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


def repeat_request(values):
    return pb_utils.InferenceRequest(
        model_name="repeat_int32",
        requested_output_names=["OUT", "IDX"],
        inputs=[
            pb_utils.Tensor("IN", values.astype(np.int32)),
            pb_utils.Tensor("DELAY", np.zeros(len(values), np.uint32)),
            pb_utils.Tensor("WAIT", np.zeros(1, np.uint32)),
        ],
    )


class TritonPythonModel:
    async def execute(self, requests):
        answers = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            calls = await asyncio.gather(repeat_request(values).async_exec(decoupled=True),
                                         repeat_request(values[::-1].copy()).async_exec(decoupled=True))
            out, idx, count = [], [], 0
            for responses in calls:
                for response in responses:
                    count += 1
                    if response.has_error():
                        raise pb_utils.TritonModelException(response.error().message())
                    if len(response.output_tensors()) == 0:
                        continue
                    out.append(int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0]))
                    idx.append(int(pb_utils.get_output_tensor_by_name(response, "IDX").as_numpy()[0]))
            answers.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array(out, np.int32)),
                pb_utils.Tensor("IDX", np.array(idx, np.uint32)),
                pb_utils.Tensor("RESPONSES", np.array([count], np.int32)),
            ]))
        return answers
