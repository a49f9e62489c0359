"""Checking a request against a model's config, with Triton's error messages. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.dtypes import config_to_wire, numpy_to_wire
from ensemble_runtime.errors import NAME_LIMIT, bounded, invalid, quote_name
from ensemble_runtime.inference import Tensor


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    wire_type: str
    dims: tuple[int, ...]  # without the batch dimension
    reshape: tuple[int, ...] | None
    optional: bool


@dataclass(frozen=True, slots=True)
class ModelSignature:
    """What a model accepts and produces, precomputed once per loaded version."""

    name: str
    max_batch_size: int
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    required: frozenset[str]  # the inputs that are not optional

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> ModelSignature:
        def spec(t: mc.ModelInput | mc.ModelOutput, optional: bool) -> TensorSpec:
            reshape = tuple(t.reshape.shape) if t.HasField("reshape") else None
            return TensorSpec(t.name, config_to_wire(mc.DataType.Name(t.data_type)), tuple(t.dims), reshape, optional)

        inputs = {t.name: spec(t, t.optional) for t in config.input}
        return cls(
            name=config.name,
            max_batch_size=config.max_batch_size,
            inputs=inputs,
            outputs={t.name: spec(t, False) for t in config.output},
            required=frozenset(name for name, s in inputs.items() if not s.optional),
        )

    def full_dims(self, spec: TensorSpec) -> list[int]:
        return ([-1] if self.max_batch_size > 0 else []) + list(spec.dims)


def _shape_matches(expected: Sequence[int], actual: Sequence[int]) -> bool:
    if expected == actual:  # the common case, and tuples compare in C
        return True
    return len(expected) == len(actual) and all(e == -1 or e == a for e, a in zip(expected, actual, strict=True))


def check_inputs(sig: ModelSignature, inputs: Mapping[str, Tensor], declared: Mapping[str, str]) -> dict[str, Tensor]:
    """Validate names, datatypes, shapes and batch size; return the inputs reshaped per config.

    `declared` maps each input to the datatype the client declared on the wire.
    """
    for name in inputs:
        if name not in sig.inputs:
            raise invalid(f"unexpected inference input {quote_name(name)} for model '{sig.name}'")
    if not sig.required <= inputs.keys():  # (a set comparison in C: no list made per request)
        missing = [n for n, spec in sig.inputs.items() if n not in inputs and not spec.optional]
        raise invalid(
            f"expected {len(sig.inputs)} inputs but got {len(inputs)} inputs for model '{sig.name}'. "
            f"Got input(s) {bounded(str(sorted(inputs)), NAME_LIMIT)}, but missing required input(s) {missing}. "
            "Please provide all required input(s)."
        )
    batch: int | None = None
    out: dict[str, Tensor] = {}
    for name, array in inputs.items():
        spec = sig.inputs[name]
        wire = declared.get(name) or numpy_to_wire(array.dtype)
        if wire != spec.wire_type:
            raise invalid(
                f"inference input {quote_name(name)} data-type is '{wire}', but model '{sig.name}' expects '{spec.wire_type}'"
            )
        shape = tuple(array.shape)  # numpy shapes hold Python ints already: no per-dimension int()
        if sig.max_batch_size > 0:
            if not shape:
                raise invalid(f"input {quote_name(name)} for model '{sig.name}' has no batch dimension")
            if shape[0] > sig.max_batch_size or shape[0] < 1:
                raise invalid(
                    f"inference request batch-size must be <= {sig.max_batch_size} for '{sig.name}' "
                    f"(input {quote_name(name)} has batch size {shape[0]})"
                )
            if batch is not None and shape[0] != batch:
                raise invalid(
                    f"inputs of model '{sig.name}' disagree on the batch size: {quote_name(name)} has {shape[0]}, expected {batch}"
                )
            batch = shape[0]
        # full_dims is [-1, *dims] with batching: the batch dimension, checked above, matches whatever it is
        dims = shape[1:] if sig.max_batch_size > 0 else shape
        if dims != spec.dims and not _shape_matches(spec.dims, dims):
            raise invalid(
                f"unexpected shape for input {quote_name(name)} for model '{sig.name}'. "
                f"Expected {sig.full_dims(spec)}, got {list(shape)}"
            )
        if spec.reshape is not None:
            lead = shape[:1] if sig.max_batch_size > 0 else ()
            array = np.reshape(array, lead + spec.reshape)
        out[name] = array
    return out


def check_requested(sig: ModelSignature, requested: Sequence[str]) -> tuple[str, ...]:
    for name in requested:
        if name not in sig.outputs:
            raise invalid(f"unexpected inference output {quote_name(name)} for model '{sig.name}'")
    return tuple(requested)
