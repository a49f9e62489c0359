"""repeat_fails (decoupled): one response per element of IN until a negative element; there `execute` raises,
mid-stream, after the responses already sent (-99: SystemExit, which must fail only this request). A request
without negatives ends normally. IN[0] == -98: the other elements are sent from a thread, which then raises
SystemExit without sending the final flag (its sender is dropped)."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def _response(value):
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([value], np.int32))])


def _send_then_exit(sender, values):
    for value in values:
        sender.send(_response(value))
    raise SystemExit(4)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            if len(values) and values[0] == -98:
                threading.Thread(target=_send_then_exit, args=(sender, values[1:]), daemon=True).start()
                continue
            for value in values:
                if value == -99:
                    raise SystemExit(3)
                if value < 0:
                    raise pb_utils.TritonModelException(f"negative element {int(value)}")
                sender.send(_response(value))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
