"""`simple` and `simple_int8`: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, in the outputs' type.

Written for the example repository of NVIDIA's client examples (ensemble_examples.triton_repository); runs
on ensemble-runtime and on Triton's Python backend alike. `auto_complete_config` gives a config that names no
tensors (a load whose override sets only `max_batch_size`) `simple`'s INT32 [16] signature, as Triton's
auto-complete does for its own `simple`.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        inputs = {t["name"] for t in config.get("input", [])}
        outputs = {t["name"] for t in config.get("output", [])}
        for name in ("INPUT0", "INPUT1"):
            if name not in inputs:
                auto_complete_model_config.add_input({"name": name, "data_type": "TYPE_INT32", "dims": [16]})
        for name in ("OUTPUT0", "OUTPUT1"):
            if name not in outputs:
                auto_complete_model_config.add_output({"name": name, "data_type": "TYPE_INT32", "dims": [16]})
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = {
            name: pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, name)["data_type"])
            for name in ("OUTPUT0", "OUTPUT1")
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = np.add(in0, in1, dtype=self.dtypes["OUTPUT0"], casting="unsafe")
            out1 = np.subtract(in0, in1, dtype=self.dtypes["OUTPUT1"], casting="unsafe")
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", out0), pb_utils.Tensor("OUTPUT1", out1),
            ]))
        return responses
