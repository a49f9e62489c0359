from __future__ import annotations

import numpy as np
import pytest
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.validation import ModelSignature, check_inputs, check_requested
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

CONFIG = """
name: "m" max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] },
        { name: "opt" data_type: TYPE_INT64 dims: [ 1 ] optional: true },
        { name: "img" data_type: TYPE_UINT8 dims: [ 6 ] reshape: { shape: [ 2, 3 ] } } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


@pytest.fixture
def sig() -> ModelSignature:
    return ModelSignature.from_config(text_format.Parse(CONFIG, mc.ModelConfig()))


def good() -> dict[str, np.ndarray]:
    return {"x": np.zeros((2, 5, 3), np.float32), "img": np.zeros((2, 6), np.uint8)}


def test_accepts_and_reshapes(sig: ModelSignature) -> None:
    out = check_inputs(sig, good(), {"x": "FP32", "img": "UINT8"})
    assert out["img"].shape == (2, 2, 3)
    assert out["x"].shape == (2, 5, 3)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"zzz": np.zeros((2, 1), np.float32)}, "unexpected inference input 'zzz' for model 'm'"),
        ({"x": np.zeros((2, 5, 3), np.float64)}, "input 'x' data-type is 'FP64', but model 'm' expects 'FP32'"),
        ({"x": np.zeros((2, 5, 4), np.float32)}, r"unexpected shape for input 'x' for model 'm'. Expected \[-1, -1, 3\]"),
        ({"x": np.zeros((5, 1, 3), np.float32), "img": np.zeros((5, 6), np.uint8)}, "batch-size must be <= 4"),
        ({"img": np.zeros((3, 6), np.uint8)}, "disagree on the batch size"),
    ],
)
def test_refuses_with_named_tensor(sig: ModelSignature, change: dict[str, np.ndarray], message: str) -> None:
    inputs = {**good(), **change}
    with pytest.raises(InferenceError, match=message) as info:
        check_inputs(sig, inputs, {})
    assert info.value.code == ErrorCode.INVALID_ARGUMENT


def test_missing_required_input(sig: ModelSignature) -> None:
    with pytest.raises(InferenceError, match=r"missing required input\(s\) \['img'\]"):
        check_inputs(sig, {"x": np.zeros((1, 1, 3), np.float32)}, {})


def test_declared_type_wins(sig: ModelSignature) -> None:
    with pytest.raises(InferenceError, match="data-type is 'INT32'"):
        check_inputs(sig, good(), {"x": "INT32"})


def test_requested_outputs(sig: ModelSignature) -> None:
    assert check_requested(sig, ["y"]) == ("y",)
    with pytest.raises(InferenceError, match="unexpected inference output 'q' for model 'm'"):
        check_requested(sig, ["q"])
