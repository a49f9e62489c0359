"""seq_idle: echoes the CORRID control input (a UINT64 correlation ID as the model sees it)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("CORRID_OUT", pb_utils.get_input_tensor_by_name(r, "CORRID").as_numpy())
            ])
            for r in requests
        ]
