"""gate_int32 (not decoupled), for tests of concurrency within one stream, with outcomes that do not depend
on timing: IN = [key, wait_ms]. wait_ms > 0: wait up to wait_ms for a release of `key`, OUT = 1 if it came,
0 if not. wait_ms == 0: release `key` (OUT = 2). Four instances, so waits and releases can run at once. The
gates are module state shared by the instances: this runtime runs them in one process (Triton runs each
instance in its own process, so this model is for our runtime only)."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils

_LOCK = threading.Lock()
_GATES = {}


def _gate(key):
    with _LOCK:
        return _GATES.setdefault(key, threading.Event())


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            key, wait_ms = (int(v) for v in pb_utils.get_input_tensor_by_name(request, "IN").as_numpy())
            if wait_ms > 0:
                out = 1 if _gate(key).wait(wait_ms / 1000.0) else 0
            else:
                _gate(key).set()
                out = 2
            answers.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([out], np.int32))]))
        return answers
