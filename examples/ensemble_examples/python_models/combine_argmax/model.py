"""Combine two classifiers: add their logits and pick the best class.

Inputs `logits_a`, `logits_b` FP32 [N] -> outputs `class_id` INT64 [1] and `label` BYTES [1]. Parameter
`labels` (comma-separated class names) in config.pbtxt. Runs unchanged on Triton's python backend.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.labels = config["parameters"]["labels"]["string_value"].split(",")

    def execute(self, requests):
        responses = []
        for request in requests:
            logits_a = pb_utils.get_input_tensor_by_name(request, "logits_a").as_numpy()
            logits_b = pb_utils.get_input_tensor_by_name(request, "logits_b").as_numpy()
            if logits_a.shape != logits_b.shape or logits_a.shape[-1] != len(self.labels):
                error = pb_utils.TritonError(
                    f"combine_argmax: logits shapes {logits_a.shape} and {logits_b.shape} do not both have "
                    f"{len(self.labels)} classes"
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            class_id = np.argmax(logits_a + logits_b, axis=-1).astype(np.int64)[..., np.newaxis]
            label = np.array([self.labels[i].encode() for i in class_id.reshape(-1)], dtype=np.object_)
            outputs = [
                pb_utils.Tensor("class_id", class_id),
                pb_utils.Tensor("label", label.reshape(class_id.shape)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
