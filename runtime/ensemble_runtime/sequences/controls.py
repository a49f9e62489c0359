"""Triton's `sequence_batching` settings, resolved, and what they put into each request. Pure.

A request of a sequence carries a correlation ID and START/END flags (request parameters `sequence_id`,
`sequence_start`, `sequence_end` on both protocols). The model sees them as control input tensors the config
names (`control_input`: CONTROL_SEQUENCE_START / END / READY / CORRID, each with its false/true values or data
type) and as implicit state tensors (`state`) the runtime keeps between the requests of one sequence.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.dtypes import config_to_wire, wire_to_numpy
from ensemble_runtime.errors import NAME_LIMIT, InferenceError, invalid, quote_name
from ensemble_runtime.inference import ParamValue, Tensor, as_object_array

CorrelationId = int | str
FLAG_START = 1  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
FLAG_END = 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
MAX_CORRELATION_ID = 2**64 - 1
STRING_ID_LIMIT = 1024  # bytes of a string correlation ID (one is kept per live sequence)
DEFAULT_IDLE_US = 1_000_000  # Triton's max_sequence_idle_microseconds when the config leaves it 0

_Kind = mc.ModelSequenceBatching.Control
_CORRID_TYPES = {mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING}


@dataclass(frozen=True, slots=True)
class SequenceTag:
    """What a request says about its sequence (from its parameters)."""

    correlation_id: CorrelationId
    flags: int = 0

    @property
    def start(self) -> bool:
        return bool(self.flags & FLAG_START)

    @property
    def end(self) -> bool:
        return bool(self.flags & FLAG_END)


SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")


def names_sequence(parameters: Mapping[str, ParamValue]) -> bool:
    """Whether the request parameters carry any of the sequence parameters (what `take_sequence_parameters`
    takes), without taking them."""
    # (a set operation in C, not `any` over a generator: perf_analyzer's requests carry parameters, and this is
    # asked of each)
    return bool(parameters) and not parameters.keys().isdisjoint(SEQUENCE_PARAMETERS)


def take_sequence_parameters(parameters: MutableMapping[str, ParamValue]) -> SequenceTag | None:
    """Remove `sequence_id`, `sequence_start`, `sequence_end` from request parameters (Triton consumes them;
    the model sees them as the request's correlation ID and flags) and check their types. None when the request
    is in no sequence (no ID, 0 or "")."""
    if not parameters:  # most requests carry no parameters at all
        return None
    id_key, start_key, end_key = SEQUENCE_PARAMETERS
    raw_id = parameters.pop(id_key, 0)
    start = parameters.pop(start_key, False)
    end = parameters.pop(end_key, False)
    for key, flag in (("sequence_start", start), ("sequence_end", end)):
        if not isinstance(flag, bool):
            raise invalid(f"parameter '{key}' must be a boolean, got {type(flag).__name__}")
    if isinstance(raw_id, bool) or not isinstance(raw_id, int | str):
        raise invalid(f"parameter 'sequence_id' must be an unsigned integer or a string, got {type(raw_id).__name__}")
    if isinstance(raw_id, int) and not 0 <= raw_id <= MAX_CORRELATION_ID:
        raise invalid(f"parameter 'sequence_id' {raw_id} is out of range for an unsigned 64-bit correlation ID")
    if isinstance(raw_id, str) and len(raw_id.encode("utf-8", "surrogatepass")) > STRING_ID_LIMIT:
        raise invalid(f"parameter 'sequence_id' is longer than {STRING_ID_LIMIT} bytes")
    if raw_id in (0, ""):
        return None
    return SequenceTag(raw_id, (FLAG_START if start else 0) | (FLAG_END if end else 0))


def describe_id(correlation_id: CorrelationId) -> str:
    return str(correlation_id) if isinstance(correlation_id, int) else quote_name(correlation_id, NAME_LIMIT)[1:-1]


@dataclass(frozen=True, slots=True)
class Control:
    """One control input: its tensor name, kind, and the false/true values (CORRID: the data type)."""

    name: str
    kind: int
    dtype: np.dtype[Any]
    false_value: Any = 0
    true_value: Any = 1


@dataclass(frozen=True, slots=True)
class StateSpec:
    input_name: str
    output_name: str
    initial: Tensor  # with the batch dimension when the model batches


@dataclass(frozen=True, slots=True)
class SequenceSettings:
    controls: tuple[Control, ...]
    states: tuple[StateSpec, ...]
    oldest: bool
    slots_per_instance: int
    batch_limit: int  # requests per execution (one per sequence)
    max_queue_delay_s: float
    idle_s: float
    batching: bool  # max_batch_size > 0: tensors carry a batch dimension

    @property
    def state_outputs(self) -> tuple[str, ...]:
        return tuple(s.output_name for s in self.states)

    def control_tensors(self, correlation_id: CorrelationId, flags: int) -> dict[str, Tensor]:
        """The control inputs of one request (READY is always true: no padding slots are ever executed)."""
        shape = (1, 1) if self.batching else (1,)
        out: dict[str, Tensor] = {}
        for control in self.controls:
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                out[control.name] = _corrid_tensor(control, correlation_id, shape)
                continue
            on = {
                _Kind.CONTROL_SEQUENCE_START: bool(flags & FLAG_START),
                _Kind.CONTROL_SEQUENCE_END: bool(flags & FLAG_END),
                _Kind.CONTROL_SEQUENCE_READY: True,
            }[control.kind]
            out[control.name] = np.full(shape, control.true_value if on else control.false_value, dtype=control.dtype)
        return out


def _corrid_tensor(control: Control, correlation_id: CorrelationId, shape: tuple[int, ...]) -> Tensor:
    if control.dtype == np.object_:
        text = str(correlation_id).encode("utf-8", "surrogatepass")
        return as_object_array([text]).reshape(shape)
    if isinstance(correlation_id, str):
        if not (correlation_id.isascii() and correlation_id.isdigit()):
            raise invalid(
                f"correlation ID {quote_name(correlation_id)} is a string but the model's CORRID control input "
                f"'{control.name}' takes {np.dtype(control.dtype).name}"
            )
        correlation_id = int(correlation_id)
    info = np.iinfo(control.dtype)
    if not info.min <= correlation_id <= info.max:
        raise invalid(
            f"correlation ID {correlation_id} does not fit the model's CORRID control input '{control.name}' "
            f"({np.dtype(control.dtype).name})"
        )
    return np.full(shape, correlation_id, dtype=control.dtype)


def has_sequence_batching(config: mc.ModelConfig) -> bool:
    return bool(config.HasField("sequence_batching"))


def settings_from_config(config: mc.ModelConfig, model_path: Path | None = None) -> SequenceSettings:
    """Resolve and check a config's sequence_batching (ConfigError names what is wrong)."""
    seq = config.sequence_batching
    name = config.name
    controls = tuple(_control(name, tensor) for tensor in seq.control_input)
    kinds = [c.kind for c in controls]
    for kind in set(kinds):
        if kinds.count(kind) > 1:
            raise ConfigError(
                f"sequence batching for model '{name}' has multiple controls of kind {_Kind.Kind.Name(kind)}"
            )
    batching = config.max_batch_size > 0
    states = tuple(_state(name, state, batching, model_path) for state in seq.state)
    oldest = seq.HasField("oldest")
    batch_limit = max(1, config.max_batch_size)
    if oldest:
        slots = seq.oldest.max_candidate_sequences or batch_limit
        delay_us = seq.oldest.max_queue_delay_microseconds
    else:
        slots = batch_limit
        delay_us = seq.direct.max_queue_delay_microseconds
    idle_us = seq.max_sequence_idle_microseconds or DEFAULT_IDLE_US
    return SequenceSettings(controls, states, oldest, slots, batch_limit, delay_us / 1e6, idle_us / 1e6, batching)


def _control(model: str, tensor: mc.ModelSequenceBatching.ControlInput) -> Control:
    if len(tensor.control) != 1:
        raise ConfigError(
            f"sequence batching control input '{tensor.name}' of model '{model}' must have exactly one control, "
            f"has {len(tensor.control)}"
        )
    ctl = tensor.control[0]
    kind = ctl.kind
    if kind == _Kind.CONTROL_SEQUENCE_CORRID:
        if ctl.data_type not in _CORRID_TYPES:
            raise ConfigError(
                f"unexpected control data type, expected TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32, or "
                f"TYPE_STRING for CONTROL_SEQUENCE_CORRID for {model}"
            )
        return Control(tensor.name, kind, _numpy_of(model, tensor.name, ctl.data_type))
    if kind not in (_Kind.CONTROL_SEQUENCE_START, _Kind.CONTROL_SEQUENCE_END, _Kind.CONTROL_SEQUENCE_READY):
        raise ConfigError(f"model '{model}': control input '{tensor.name}' has unsupported kind {kind}")
    pairs = [
        (np.dtype(np.int32), list(ctl.int32_false_true)),
        (np.dtype(np.float32), list(ctl.fp32_false_true)),
        (np.dtype(np.bool_), list(ctl.bool_false_true)),
    ]
    given = [(dtype, values) for dtype, values in pairs if values]
    if len(given) != 1 or len(given[0][1]) != 2:
        raise ConfigError(
            f"sequence batching control '{_Kind.Kind.Name(kind)}' for model '{model}' must specify exactly one of "
            "'int32_false_true', 'fp32_false_true' or 'bool_false_true', with two values (false, true)"
        )
    dtype, values = given[0]
    return Control(tensor.name, kind, dtype, values[0], values[1])


def _state(
    model: str, state: mc.ModelSequenceBatching.State, batching: bool, model_path: Path | None
) -> StateSpec:
    if not state.input_name or not state.output_name:
        raise ConfigError(f"model '{model}': a sequence_batching state needs input_name and output_name")
    if state.data_type not in mc.DataType.values() or state.data_type == mc.TYPE_INVALID:
        raise ConfigError(f"model '{model}': state '{state.input_name}' has no valid data_type")
    dtype = _numpy_of(model, state.input_name, state.data_type)
    dims = [int(d) for d in state.dims]
    if any(d < -1 or d == 0 for d in dims):
        raise ConfigError(f"model '{model}': state '{state.input_name}' has invalid dims {dims}")
    if len(state.initial_state) > 1:
        raise ConfigError(
            f"initial_state field for state input '{state.input_name}' must contain exactly one or zero element. "
            f"Found '{len(state.initial_state)}' elements."
        )
    shape = [max(d, 0) for d in dims]  # a variable dimension starts empty
    initial: Tensor = np.zeros(shape, dtype=dtype) if dtype != np.object_ else as_object_array([b""] * int(np.prod(shape))).reshape(shape)
    if state.initial_state:
        initial = _initial_state(model, state, state.initial_state[0], dtype, dims, model_path)
    if batching:
        initial = initial.reshape((1, *initial.shape))
    initial.setflags(write=False)
    return StateSpec(state.input_name, state.output_name, initial)


def _initial_state(
    model: str,
    state: mc.ModelSequenceBatching.State,
    init: mc.ModelSequenceBatching.InitialState,
    dtype: np.dtype[Any],
    dims: list[int],
    model_path: Path | None,
) -> Tensor:
    where = f"model '{model}': initial_state of state '{state.input_name}'"
    if init.data_type != state.data_type:
        raise ConfigError(
            f"The data type used for 'initial_state' field of state '{state.input_name}' does not match the state "
            "data type."
        )
    shape = [int(d) for d in init.dims]
    if len(shape) != len(dims) or any(d < 1 for d in shape) or any(s not in (d, -1) and d != s for d, s in zip(shape, dims, strict=True)):
        raise ConfigError(f"{where}: dims {shape} do not match the state dims {dims} (no variable dimensions)")
    count = int(np.prod(shape))
    choice = init.WhichOneof("state_data")
    if choice == "zero_data" or choice is None:
        if choice is None:
            raise ConfigError(f"initial_state setting expects state'{state.input_name}' to have state_data set")
        return np.zeros(shape, dtype=dtype)
    if model_path is None or dtype == np.object_:
        raise ConfigError(f"{where}: data_file is supported for numeric states of models loaded from a repository")
    path = (model_path / "initial_state" / init.data_file).resolve()
    if model_path.resolve() not in path.parents:
        raise ConfigError(f"{where}: data_file '{init.data_file}' is outside the model directory")
    raw = path.read_bytes() if path.is_file() else b""
    need = count * dtype.itemsize
    if len(raw) < need:
        raise ConfigError(
            f"initial_state setting expects {need} bytes, but the data provided from {init.data_file} only has "
            f"{len(raw)} bytes."
        )
    return np.frombuffer(raw[:need], dtype=dtype).reshape(shape).copy()


def _numpy_of(model: str, name: str, data_type: int) -> np.dtype[Any]:
    try:
        return wire_to_numpy(config_to_wire(mc.DataType.Name(data_type)))
    except (InferenceError, ValueError):
        raise ConfigError(f"model '{model}': '{name}' has unsupported data type {data_type}") from None


def strip_states(outputs: Mapping[str, Tensor], settings: SequenceSettings) -> dict[str, Tensor]:
    return {k: v for k, v in outputs.items() if k not in settings.state_outputs}
