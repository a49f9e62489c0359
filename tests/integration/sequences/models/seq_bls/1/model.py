"""seq_bls: forwards INPUT to seq_state with this request's correlation ID and sequence flags (BLS)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="seq_state",
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT")],
                requested_output_names=["OUTPUT"],
                correlation_id=request.correlation_id(),
                flags=request.flags(),
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.get_output_tensor_by_name(answer, "OUTPUT")]))
        return responses
