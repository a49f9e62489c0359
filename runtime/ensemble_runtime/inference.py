"""Transport-neutral inference request and response types shared by every layer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ensemble_runtime.responses import ResponseChannel

Tensor = npt.NDArray[Any]
ParamValue = bool | int | float | str


@dataclass(slots=True)
class InferRequest:
    """One inference call as the data plane sees it (after protocol decoding)."""

    model_name: str
    model_version: str = ""
    inputs: dict[str, Tensor] = field(default_factory=dict)
    requested_outputs: list[str] = field(default_factory=list)  # empty = all outputs
    id: str = ""
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    # per requested output parameters (e.g. classification), kept for echo only
    output_parameters: dict[str, dict[str, ParamValue]] = field(default_factory=dict)


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    outputs: dict[str, Tensor]
    id: str = ""
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BackendRequest:
    """What a backend instance receives: validated inputs and the outputs wanted."""

    inputs: Mapping[str, Tensor]
    requested_outputs: tuple[str, ...]
    parameters: Mapping[str, ParamValue] = field(default_factory=dict)
    request_id: str = ""
    correlation_id: int | str = 0  # the sequence it belongs to (0: none); see sequences/
    flags: int = 0  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START (1) | _END (2)
    responses: ResponseChannel | None = None  # set for a decoupled model: where its responses go


BackendResult = dict[str, Tensor] | BaseException


def batch_size_of(inputs: Mapping[str, Tensor]) -> int:
    """Leading dimension shared by the inputs of a batched request (1 when there are none)."""
    for array in inputs.values():
        return int(array.shape[0]) if array.ndim else 1
    return 1


def run_merged(
    run: Callable[[Mapping[str, Tensor]], Mapping[str, Tensor]], requests: Sequence[BackendRequest]
) -> list[BackendResult]:
    """The scheduler's batch as one call: inputs concatenated on the batch axis, `run` once, outputs split back."""
    sizes = [batch_size_of(r.inputs) for r in requests]
    merged = {name: np.concatenate([r.inputs[name] for r in requests], axis=0) for name in requests[0].inputs}
    outputs = run(merged)
    results: list[BackendResult] = []
    offset = 0
    for size in sizes:
        results.append({name: value[offset : offset + size] for name, value in outputs.items()})
        offset += size
    return results


def as_object_array(values: list[bytes]) -> npt.NDArray[np.object_]:
    out = np.empty(len(values), dtype=np.object_)
    out[:] = values
    return out
