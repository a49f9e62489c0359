"""simple_string_dyna_sequence: accumulates INPUT per correlation ID (kept by the model itself, which works
because every request of a sequence reaches the same instance); the END request adds int(CORRID)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _get(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value, start, end = int(_get(request, "INPUT").flat[0]), int(_get(request, "START").flat[0]), int(_get(request, "END").flat[0])
            raw = _get(request, "CORRID").flat[0]
            corrid = raw.decode() if isinstance(raw, bytes) else str(raw)
            total = value if start else self.totals.get(corrid, 0) + value
            self.totals[corrid] = total
            out = total
            if end:
                out += int(corrid)
                del self.totals[corrid]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.full((1, 1), out, np.int32))]))
        return responses
