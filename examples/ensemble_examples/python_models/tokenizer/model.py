"""A hashing tokenizer: text -> fixed-length token ids.

Input `text` BYTES [1] -> output `token_ids` INT64 [L], L from the output's `dims`. Words (lower-cased runs of
letters, digits and apostrophes) hash with CRC-32 into ids 1..V-1, V from parameter `vocabulary_size`
(default 100); 0 pads, and texts longer than L words are cut. Deterministic across processes (no `hash()`),
so it can run as several instances. Runs unchanged on Triton's python backend.
"""

import json
import re
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

WORD = re.compile(r"[a-z0-9']+")
PAD = 0


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        output = pb_utils.get_output_config_by_name(config, "token_ids")
        self.length = int(output["dims"][-1])
        parameters = config.get("parameters", {})
        self.vocabulary = int(parameters.get("vocabulary_size", {}).get("string_value", "100"))
        if self.vocabulary < 2:
            raise pb_utils.TritonModelException(f"vocabulary_size must be at least 2, got {self.vocabulary}")

    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "text").as_numpy()
            try:
                rows = [self.tokenize(item) for item in texts.reshape(-1)]
            except UnicodeDecodeError as exc:
                error = pb_utils.TritonError(f"tokenizer: text is not UTF-8: {exc}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            ids = np.array(rows, dtype=np.int64).reshape((*texts.shape[:-1], self.length))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("token_ids", ids)]))
        return responses

    def tokenize(self, item):
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
        words = WORD.findall(text.lower())[: self.length]
        ids = [1 + zlib.crc32(word.encode()) % (self.vocabulary - 1) for word in words]
        return ids + [PAD] * (self.length - len(ids))
