"""Engine IO description, Triton's batch rule against optimization profiles, autocomplete, request checks."""

from __future__ import annotations

import numpy as np
import pytest
from ensemble_runtime.backends.trt_engine import (
    EngineTensor,
    autocomplete,
    check_config,
    check_request,
    describe_engine,
    numpy_dtype,
    profile_max_batch,
)
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.inference import Tensor
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.gpu.fakes import DataType, FakeCudart, FakeEngine, FakeTensor, TensorIOMode, default_tensors

IO = 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "k" data_type: TYPE_INT64 dims: [ 1 ] } ] ' \
     'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "pos" data_type: TYPE_BOOL dims: [ 4 ] } ]'


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" platform: "tensorrt_plan" {text}', mc.ModelConfig())


def tensors() -> list[EngineTensor]:
    return describe_engine(FakeEngine(default_tensors(), FakeCudart()))


def test_describe_engine_maps_types_shapes_and_profiles() -> None:
    described = {t.name: t for t in tensors()}
    assert [t.name for t in tensors()] == ["x", "k", "y", "pos"]
    assert described["x"].dtype == np.float32 and described["x"].shape == (-1, 4) and described["x"].is_input
    assert described["k"].dtype == np.int64 and described["k"].profiles[1] == ((1, 1), (2, 1), (4, 1))
    assert described["pos"].dtype == np.bool_ and not described["pos"].is_input and described["pos"].profiles == ()


def test_type_mapping_and_refusal() -> None:
    assert [numpy_dtype(n, "t") for n in ("HALF", "INT8", "INT32", "UINT8")] == [
        np.float16, np.int8, np.int32, np.uint8]
    with pytest.raises(ConfigError, match="engine tensor 't' has TensorRT type BF16, which has no numpy equivalent"):
        numpy_dtype("BF16", "t")
    engine = FakeEngine([FakeTensor("b", TensorIOMode.OUTPUT, DataType.BF16, (2,))], FakeCudart())
    with pytest.raises(ConfigError, match="BF16"):
        describe_engine(engine)


def test_autocomplete_takes_io_and_the_profiles_batch() -> None:
    completed = autocomplete(config(""), tensors())
    assert completed.max_batch_size == 4  # the smallest max batch over both profiles
    assert completed.HasField("dynamic_batching")
    assert [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in completed.input] == [
        ("x", "TYPE_FP32", [4]), ("k", "TYPE_INT64", [1])]
    assert [(t.name, mc.DataType.Name(t.data_type)) for t in completed.output] == [("y", "TYPE_FP32"), ("pos", "TYPE_BOOL")]
    full = config(f"max_batch_size: 2 {IO}")
    assert autocomplete(full, tensors()) is full
    static = [EngineTensor("a", True, np.dtype(np.float32), (3, 4), (((3, 4),) * 3,)),
              EngineTensor("b", False, np.dtype(np.float32), (3,))]
    completed = autocomplete(config(""), static)
    assert completed.max_batch_size == 0 and list(completed.input[0].dims) == [3, 4]


def test_check_config_accepts_a_matching_config() -> None:
    check_config(config(f"max_batch_size: 8 {IO}"), tensors(), [0])
    check_config(config(f"max_batch_size: 4 {IO}"), tensors(), [0, 1])


def test_max_batch_size_beyond_the_profile_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"max_batch_size 8 exceeds the largest batch of optimization profile\(s\) "
                                          r"0, 1 \(4\); rebuild the plan with a larger --max-shapes batch"):
        check_config(config(f"max_batch_size: 8 {IO}"), tensors(), [0, 1])


@pytest.mark.parametrize(("text", "message"), [
    ('max_batch_size: 4 input [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] } ]',
     "config input 'z' is not an input of the engine \\(x, k\\)"),
    ('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP16 dims: [ 4 ] } ]',
     "input 'x' is TYPE_FP16 in the config but TYPE_FP32 in the engine"),
    ('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ 5 ] } ]',
     r"input 'x' has dims \[5\] in the config but \[4\] in the engine \(after the batch dimension\)"),
    ('max_batch_size: 0 input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]',
     r"input 'x' has dims \[4\] in the config but \[-1, 4\] in the engine"),
    ('max_batch_size: 4 output [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]',
     "config output 'x' is not an output of the engine"),
])
def test_check_config_refusals(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_config(config(text), tensors(), [0])


def test_batching_needs_a_dynamic_first_dimension() -> None:
    static = [EngineTensor("a", True, np.dtype(np.float32), (1, 4), (((1, 4),) * 3,))]
    with pytest.raises(ConfigError, match=r"max_batch_size 2 needs a dynamic first dimension, but engine input 'a' "
                                          r"has shape \[1, 4\]"):
        check_config(config('max_batch_size: 2 input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] } ]'), static, [0])
    assert profile_max_batch(static) == 1


def test_requests_are_checked_against_the_contexts_profile() -> None:
    described = tensors()
    ok: dict[str, Tensor] = {"x": np.zeros((4, 4), np.float32), "k": np.ones((4, 1), np.int64)}
    check_request(ok, described, 0, "m")
    with pytest.raises(InferenceError, match=r"input 'x' shape \[5, 4\] is outside optimization profile 1 "
                                             r"\(min \[1, 4\], max \[4, 4\]\)") as caught:
        check_request({"x": np.zeros((5, 4), np.float32), "k": np.ones((5, 1), np.int64)}, described, 1, "m")
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(InferenceError, match="input 'k' is int32, the engine expects int64"):
        check_request({**ok, "k": np.ones((4, 1), np.int32)}, described, 0, "m")
    with pytest.raises(InferenceError, match="missing input 'k'"):
        check_request({"x": ok["x"]}, described, 0, "m")
