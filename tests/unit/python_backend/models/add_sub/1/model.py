# The shape of Triton's python_backend add_sub example, unchanged API usage.
import json
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0 = pb_utils.Tensor("OUTPUT0", (in_0.as_numpy() + in_1.as_numpy()).astype(self.output0_dtype))
            out_1 = pb_utils.Tensor("OUTPUT1", (in_0.as_numpy() - in_1.as_numpy()).astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0, out_1]))
        return responses

    def finalize(self):
        marker = os.path.join(self.args["model_repository"], "finalized-" + self.args["model_instance_name"])
        with open(marker, "w") as f:
            f.write("done")
