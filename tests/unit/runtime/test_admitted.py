"""An admitted request's response and statistics (ensemble_runtime.admitted): the outputs the client asked for, an
output the model did not produce an INTERNAL error naming it, an error or a BaseException the model raised an answer
(never raised on), and the model's own error response a success of the model but a failure of an ensemble."""

from __future__ import annotations

import numpy as np
import pytest
from ensemble_runtime.admitted import Admitted
from ensemble_runtime.config.model_config import parse_config_text
from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError
from ensemble_runtime.inference import BackendRequest
from ensemble_runtime.registry import LoadedVersion

CONFIG = """
name: "two"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "Z" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def admitted(requested: tuple[str, ...], start_ns: int = 1_000) -> Admitted:
    lv = LoadedVersion(model="two", version=3, config=parse_config_text(CONFIG), scheduler=None)
    x = np.zeros(2, np.float32)
    return Admitted(lv, BackendRequest({"X": x}, requested), {}, "two", "req-7", start_ns)


def test_the_response_carries_the_requested_outputs_only_with_the_requests_names() -> None:
    y, z = np.ones(2, np.float32), np.full(2, 2, np.float32)
    response = admitted(("Z",)).respond({"Y": y, "Z": z}, {"ensemble_versions": "a:1"})
    assert list(response.outputs) == ["Z"]
    np.testing.assert_array_equal(response.outputs["Z"], z)
    assert (response.model_name, response.model_version, response.id) == ("two", "3", "req-7")
    assert response.parameters == {"ensemble_versions": "a:1"}


def test_an_output_the_model_did_not_produce_is_an_internal_error_naming_it() -> None:
    with pytest.raises(InferenceError) as caught:
        admitted(("Y", "Z")).respond({"Y": np.ones(2, np.float32)}, {})
    assert caught.value.code is ErrorCode.INTERNAL
    assert "['Z']" in caught.value.message and "'two'" in caught.value.message
    outcome = admitted(("Z",)).outcome({"Y": np.ones(2, np.float32)}, {})  # returned, not raised
    assert isinstance(outcome, InferenceError) and outcome.code is ErrorCode.INTERNAL


def test_what_the_model_raised_is_the_answer() -> None:
    error = InferenceError(ErrorCode.INVALID_ARGUMENT, "no")
    assert admitted(("Y",)).outcome(error, {}) is error
    contained = admitted(("Y",)).outcome(SystemExit(3), {})
    assert isinstance(contained, InferenceError) and contained.code is ErrorCode.INTERNAL
    assert "model 'two'" in contained.message and "SystemExit(3)" in contained.message


def test_the_models_own_error_response_is_its_success_and_an_ensembles_failure() -> None:
    model = admitted(("Y",), start_ns=1_000)
    model.count_failure(ResponseError(ErrorCode.INVALID_ARGUMENT, "bad"), 5_000, ensemble=False)
    assert (model.lv.stats.success.count, model.lv.stats.success.ns, model.lv.stats.fail.count) == (1, 4_000, 0)
    model.count_failure(RuntimeError("boom"), 6_000, ensemble=False)
    assert (model.lv.stats.fail.count, model.lv.stats.fail_reasons) == (1, {"BACKEND": 1})

    ensemble = admitted(("Y",), start_ns=1_000)
    ensemble.count_failure(ResponseError(ErrorCode.INVALID_ARGUMENT, "bad"), 2_000, ensemble=True)
    assert (ensemble.lv.stats.success.count, ensemble.lv.stats.fail.count) == (0, 1)
    assert ensemble.lv.stats.fail_reasons == {"OTHER": 1}


def test_a_success_counts_its_time_from_admission() -> None:
    request = admitted(("Y",), start_ns=10_000)
    request.count_success(12_500)
    assert (request.lv.stats.success.count, request.lv.stats.success.ns) == (1, 2_500)
    assert request.lv.stats.last_inference_ms > 0
