"""Triton python model equivalent to the ONNX `text_scorer` of ensemble_examples (for servers without the
ONNX Runtime backend): `token_ids` INT64 [-1,16] -> embedding gather -> mean over tokens -> dense(1) -> sigmoid
-> `score` FP32 [-1,1]. The weights are the ONNX model's initializers, saved next to this file as weights.npz."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "weights.npz")
        with np.load(path) as weights:
            self.embedding = weights["embedding"].astype(np.float32)
            self.fc_w = weights["fc_w"].astype(np.float32)
            self.fc_b = weights["fc_b"].astype(np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "token_ids").as_numpy()
            mean = self.embedding[ids].mean(axis=-2)
            raw = mean @ self.fc_w + self.fc_b
            score = (1.0 / (1.0 + np.exp(-raw))).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("score", score)]))
        return responses
