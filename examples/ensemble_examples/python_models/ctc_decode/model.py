"""Greedy CTC decoding: per-column class logits -> one string per row.

Input `logits` FP32 [-1, T, C] -> output `text` BYTES [-1]. Parameter `alphabet` in config.pbtxt: C
characters, the first one the CTC blank. Each row takes the best class per column, merges repeats, then drops
blanks. Not batching: the first dimension is the number of text regions, which may be 0. Runs unchanged on
Triton's python backend.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

BLANK = 0


def greedy_decode(best, alphabet):
    """`best`: class index per column -> the decoded string."""
    chars = []
    previous = BLANK
    for index in best:
        if index != previous and index != BLANK:
            chars.append(alphabet[index])
        previous = index
    return "".join(chars)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.alphabet = config["parameters"]["alphabet"]["string_value"]
        if len(self.alphabet) < 2:
            raise pb_utils.TritonModelException("alphabet needs the blank and at least one character")

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy()
            if logits.ndim != 3 or logits.shape[-1] != len(self.alphabet):
                error = pb_utils.TritonError(
                    f"ctc_decode: logits of shape {list(logits.shape)}, expected [regions, columns, "
                    f"{len(self.alphabet)}] for alphabet '{self.alphabet}'"
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            best = np.argmax(logits, axis=-1)
            text = np.empty(len(best), dtype=np.object_)
            text[:] = [greedy_decode(row.tolist(), self.alphabet).encode() for row in best]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text", text)]))
        return responses
