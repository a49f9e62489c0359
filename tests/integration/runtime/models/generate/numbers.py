import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A batching model: `y` = 2x, `n` = x's element count, `described` = the shapes and types it received."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            described = f"x {list(x.shape)} {x.dtype.name}"
            for name in ("k", "flag"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    value = tensor.as_numpy()
                    described += f", {name} {list(value.shape)} {value.dtype.name} {value.reshape(-1).tolist()}"
            batch = x.shape[0]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("y", x * 2),
                pb_utils.Tensor("n", np.full((batch, 1), x.size, dtype=np.int64)),
                pb_utils.Tensor("described", np.array([[described]] * batch, dtype=object)),
            ]))
        return responses
