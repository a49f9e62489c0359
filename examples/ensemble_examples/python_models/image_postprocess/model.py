"""Turn classifier logits into the top-k labels as "label:probability" strings.

Input `logits` FP32 [N] -> output `labels` BYTES [k]. Parameters in config.pbtxt: `top_k` (default 3) and
`labels` (comma-separated class names, one per logit). Runs unchanged on Triton's python backend.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        self.labels = parameters["labels"]["string_value"].split(",")
        self.top_k = int(parameters.get("top_k", {}).get("string_value", "3"))
        if not 1 <= self.top_k <= len(self.labels):
            raise pb_utils.TritonModelException(
                f"top_k must be between 1 and {len(self.labels)} (the number of labels), got {self.top_k}"
            )

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy().astype(np.float32)
            if logits.shape[-1] != len(self.labels):
                error = pb_utils.TritonError(
                    f"image_postprocess: got {logits.shape[-1]} logits for {len(self.labels)} labels"
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            probabilities = softmax(logits)
            order = np.argsort(-probabilities, axis=-1, kind="stable")[..., : self.top_k]
            flat_order = order.reshape(-1, self.top_k)
            flat_probabilities = probabilities.reshape(-1, len(self.labels))
            rows = [
                [f"{self.labels[i]}:{row[i]:.4f}".encode() for i in indices]
                for indices, row in zip(flat_order, flat_probabilities, strict=True)
            ]
            labels = np.array(rows, dtype=np.object_).reshape(order.shape)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("labels", labels)]))
        return responses
