"""Pure parts of sequence batching: request parameters, control tensors, config resolution and its errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ensemble_runtime.config.model_config import ConfigError, parse_config_text
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.sequences import FLAG_END, FLAG_START, settings_from_config, take_sequence_parameters
from ensemble_runtime.sequences.controls import names_sequence

BASE = """
name: "m"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{ {body} }}
"""

CONTROLS = """
control_input [
  { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
  { name: "E" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
  { name: "R" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 5, 9 ] } ] },
  { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_%s } ] }
]
"""


def settings(body: str, mbs: int = 4, model_path: Path | None = None):  # type: ignore[no-untyped-def]
    return settings_from_config(parse_config_text(BASE.format(mbs=mbs, body=body)), model_path)


def test_parameters_are_taken_out_of_the_request() -> None:
    params: dict[str, bool | int | float | str] = {"sequence_id": 7, "sequence_start": True, "other": 1}
    tag = take_sequence_parameters(params)
    assert tag is not None and tag.correlation_id == 7 and tag.start and not tag.end
    assert params == {"other": 1}
    assert take_sequence_parameters({"sequence_id": 0, "sequence_end": True}) is None
    assert take_sequence_parameters({"sequence_id": ""}) is None
    tag = take_sequence_parameters({"sequence_id": "abc", "sequence_end": True})
    assert tag is not None and tag.flags == FLAG_END


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({}, False),
        ({"priority": 0, "timeout": 10}, False),  # what other clients send: no sequence
        ({"sequence_id": 0}, True),  # named, even where it ends up no sequence: `take_sequence_parameters` decides
        ({"x": 1, "sequence_end": False}, True),
        ({"sequence_start": True}, True),
    ],
)
def test_names_sequence_sees_any_of_the_three(params: dict[str, bool | int | float | str], names: bool) -> None:
    assert names_sequence(params) is names


@pytest.mark.parametrize(
    "params",
    [{"sequence_id": 2**64}, {"sequence_id": -1}, {"sequence_id": True}, {"sequence_id": 1.5},
     {"sequence_id": 1, "sequence_start": 1}, {"sequence_id": "x" * 1025}],
)
def test_bad_parameters_are_invalid_argument(params: dict[str, bool | int | float | str]) -> None:
    with pytest.raises(InferenceError) as caught:
        take_sequence_parameters(params)
    assert caught.value.code.name == "INVALID_ARGUMENT"


def test_control_tensors_take_the_configured_types_and_values() -> None:
    s = settings(CONTROLS % "UINT64")
    out = s.control_tensors(2**64 - 1, FLAG_START)
    assert out["S"].dtype == np.float32 and out["S"].tolist() == [[1.0]]
    assert out["E"].dtype == np.bool_ and out["E"].tolist() == [[False]]
    assert out["R"].dtype == np.int32 and out["R"].tolist() == [[9]]
    assert out["C"].dtype == np.uint64 and int(out["C"][0, 0]) == 2**64 - 1
    assert settings(CONTROLS % "UINT64", mbs=0).control_tensors(3, FLAG_END)["E"].shape == (1,)


def test_corrid_types() -> None:
    assert settings(CONTROLS % "STRING").control_tensors(12, 0)["C"][0, 0] == b"12"
    assert settings(CONTROLS % "STRING").control_tensors("ab", 0)["C"][0, 0] == b"ab"
    assert int(settings(CONTROLS % "INT32").control_tensors("12", 0)["C"][0, 0]) == 12
    with pytest.raises(InferenceError):
        settings(CONTROLS % "INT32").control_tensors(2**40, 0)
    with pytest.raises(InferenceError):
        settings(CONTROLS % "UINT64").control_tensors("abc", 0)


def test_strategies_slots_and_idle() -> None:
    direct = settings("direct { max_queue_delay_microseconds: 2000 }", mbs=4)
    assert (direct.oldest, direct.slots_per_instance, direct.batch_limit, direct.max_queue_delay_s) == (False, 4, 4, 0.002)
    assert direct.idle_s == 1.0  # Triton's default
    oldest = settings("max_sequence_idle_microseconds: 5000 oldest { max_candidate_sequences: 16 }", mbs=4)
    assert (oldest.oldest, oldest.slots_per_instance, oldest.batch_limit, oldest.idle_s) == (True, 16, 4, 0.005)
    assert settings("", mbs=0).slots_per_instance == 1


def test_state_initial_values(tmp_path: Path) -> None:
    state = 'state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 2 ] } ]'
    spec = settings(state).states[0]
    assert spec.initial.shape == (1, 2) and not spec.initial.any()
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s.bin").write_bytes(np.array([1.5, 2.5], np.float32).tobytes())
    from_file = state.replace(
        "dims: [ 2 ] }", 'dims: [ 2 ] initial_state: { data_type: TYPE_FP32 dims: [ 2 ] data_file: "s.bin" name: "f" } }'
    )
    assert settings(from_file, mbs=0, model_path=tmp_path).states[0].initial.tolist() == [1.5, 2.5]
    outside = from_file.replace('"s.bin"', '"../../etc/passwd"')
    with pytest.raises(ConfigError, match="outside the model directory"):
        settings(outside, mbs=0, model_path=tmp_path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]', "exactly one of"),
        ('control_input [ { name: "S" control [ ] } ]', "exactly one control"),
        ('control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]',
         "unexpected control data type"),
        ('control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },'
         ' { name: "B" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ]', "multiple controls"),
        ('state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 0 ] } ]', "invalid dims"),
        ('state [ { input_name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]', "input_name and output_name"),
    ],
)
def test_config_errors(body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(body)
