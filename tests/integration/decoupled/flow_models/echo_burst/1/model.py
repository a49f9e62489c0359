"""echo_burst (decoupled): sends IN back COUNT times, then the final flag alone; a stream of large responses
whose size each request states."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for _ in range(count):
                sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", data.copy())]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
