"""bls_repeat: BLS to the decoupled repeat_int32 with exec(decoupled=True), iterating the responses as they
come; OUT and IDX gather every response's values, RESPONSES counts the responses the iterator gave (the
last one is empty: repeat_int32 sends its final flag alone)."""

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


def gather(responses):
    out, idx, count = [], [], 0
    for response in responses:
        count += 1
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        if len(response.output_tensors()) == 0:
            continue
        out.append(int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0]))
        idx.append(int(pb_utils.get_output_tensor_by_name(response, "IDX").as_numpy()[0]))
    return pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor("OUT", np.array(out, np.int32)),
        pb_utils.Tensor("IDX", np.array(idx, np.uint32)),
        pb_utils.Tensor("RESPONSES", np.array([count], np.int32)),
    ])


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            answers.append(gather(repeat_request(values).exec(decoupled=True)))
        return answers
