"""The `triton_python_backend_utils` surface on its own: types, tensors, errors, config helpers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from ensemble_runtime.backends.python import pb_utils as package_pb_utils
from ensemble_runtime.backends.python.auto_complete import triton_config_json
from ensemble_runtime.backends.python.bls import BlsUnavailableError
from ensemble_runtime.backends.python.pb_types import arrived
from ensemble_runtime.config.model_config import apply_defaults, parse_config_text
from tritonclient.grpc import model_config_pb2 as mc


def test_top_level_module_re_exports_the_package_api() -> None:
    assert pb_utils.__all__ == package_pb_utils.__all__
    for name in package_pb_utils.__all__:
        assert getattr(pb_utils, name) is getattr(package_pb_utils, name)


def test_type_conversions_match_triton() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.dtype(np.int64)) == 9
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(1) is np.bool_
    assert pb_utils.triton_to_numpy_type(14) is None


def test_tensor_encodes_str_to_bytes_and_reports_its_type() -> None:
    tensor = pb_utils.Tensor("T", np.array([["a", "é"]]))
    assert tensor.as_numpy().dtype == np.object_
    assert tensor.as_numpy().tolist() == [[b"a", "é".encode()]]
    assert tensor.triton_dtype() == 13
    assert tensor.shape() == [1, 2]
    assert tensor.name() == "T" and tensor.is_cpu()
    mixed = pb_utils.Tensor("M", np.array([b"x", "y"], dtype=np.object_))
    assert mixed.as_numpy().tolist() == [b"x", b"y"]


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([True, False]),
        np.frombuffer(np.arange(4, dtype=np.int64).tobytes(), dtype=np.int64),  # read-only, as a request's bytes
        np.array([b"a", b"bc"], dtype=np.object_),  # BYTES: the checks
        np.array(["a", "bc"]),  # str: encoded
        np.ma.masked_array(np.arange(3, dtype=np.int32)),  # a subclass: made plain
    ],
)
def test_an_arrived_input_is_the_tensor_its_constructor_makes(array: np.ndarray) -> None:
    made, fast = pb_utils.Tensor("X", array), arrived("X", array)
    assert type(fast) is pb_utils.Tensor and fast.name() == made.name() == "X"
    assert fast.triton_dtype() == made.triton_dtype() and fast.shape() == made.shape()
    got, want = fast.as_numpy(), made.as_numpy()
    assert type(got) is type(want) is np.ndarray and got.dtype == want.dtype and np.array_equal(got, want)
    assert got.flags.writeable  # a read-only one copied on first use, as the constructor's


def test_an_arrived_input_of_no_triton_type_is_refused_as_the_constructor_refuses_it() -> None:
    array = np.arange(3, dtype=np.dtype(">i4"))  # not native-endian: no Triton type
    with pytest.raises(pb_utils.TritonModelException, match="has no Triton type"):
        arrived("X", array)


def test_tensor_dlpack_round_trip() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor.from_dlpack("D", pb_utils.Tensor("S", array).as_numpy())
    np.testing.assert_array_equal(tensor.as_numpy(), array)
    with pytest.raises(pb_utils.TritonModelException, match="DLPack"):
        pb_utils.Tensor("B", np.array([b"x"], dtype=np.object_)).to_dlpack()


def test_triton_error_defaults_to_internal() -> None:
    error = pb_utils.TritonError("boom")
    assert error.message() == "boom" and error.code() == pb_utils.TritonError.INTERNAL
    assert pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG).code() == 3
    assert pb_utils.TritonModelException("m").message() == "m"


def test_response_accessors() -> None:
    out = pb_utils.Tensor("OUT", np.zeros(2, dtype=np.float32))
    response = pb_utils.InferenceResponse(output_tensors=[out])
    assert not response.has_error() and response.error() is None
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None
    with pytest.raises(pb_utils.TritonModelException, match=r"must be pb_utils\.Tensor"):
        pb_utils.InferenceResponse(output_tensors=[np.zeros(1)])  # type: ignore[list-item]


def test_request_parameters_and_response_sender() -> None:
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=["Y"], parameters='{"k": 1}')
    assert json.loads(request.parameters()) == {"k": 1}
    # compact, as Triton's stub writes it (a model that echoes it answers the same on both servers)
    assert pb_utils.InferenceRequest(model_name="m", parameters={"k": 1, "s": "a b"}).parameters() == '{"k":1,"s":"a b"}'
    assert pb_utils.InferenceResponse(parameters={"t": True}).parameters() == '{"t":true}'
    assert request.requested_output_names() == ["Y"]
    with pytest.raises(pb_utils.TritonModelException, match="decoupled"):
        request.get_response_sender()
    with pytest.raises(pb_utils.TritonModelException, match="parameter 'x'"):
        pb_utils.InferenceRequest(model_name="m", parameters={"x": [1]})


def test_exec_outside_a_model_call_says_so() -> None:
    with pytest.raises(BlsUnavailableError, match="only be called while the runtime is running"):
        pb_utils.InferenceRequest(model_name="m").exec()


def test_model_config_json_looks_like_tritons() -> None:
    text = 'name: "m" backend: "python" input { name: "X" data_type: TYPE_FP32 dims: [ 4, -1 ] }'
    config = json.loads(triton_config_json(apply_defaults(parse_config_text(text), "m")))
    assert config["max_batch_size"] == 0
    assert config["input"][0]["dims"] == [4, -1]  # numbers, as Triton gives them, not protobuf's strings
    assert config["output"] == []
    assert pb_utils.get_input_config_by_name(config, "X")["data_type"] == "TYPE_FP32"  # type: ignore[index]
    assert pb_utils.get_output_config_by_name(config, "X") is None


def test_auto_complete_model_config_refuses_conflicts() -> None:
    base = mc.ModelConfig(name="m", max_batch_size=8)
    base.input.add(name="X", data_type=mc.TYPE_FP32, dims=[4])
    auto = pb_utils.ModelConfig(triton_config_json(base))
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        auto.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError, match="specifies dims"):
        auto.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [5]})
    with pytest.raises(ValueError, match="max_batch_size 8"):
        auto.set_max_batch_size(4)
    with pytest.raises(ValueError, match="missing 'dims'"):
        auto.add_output({"name": "Y", "data_type": "TYPE_FP32"})
    auto.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
    assert [o["name"] for o in auto.as_dict()["output"]] == ["Y"]


def test_bytes_serialization_helpers_round_trip() -> None:
    array = np.array([b"ab", b"", "c"], dtype=np.object_)
    serialized = pb_utils.serialize_byte_tensor(array)
    assert serialized is not None
    assert pb_utils.deserialize_bytes_tensor(serialized[0]).tolist() == [b"ab", b"", b"c"]
