"""A TensorRT engine's inputs/outputs as plain data, and the checks that need no GPU. Pure.

`describe_engine` reads the TensorRT 10 engine API (`num_io_tensors`, `get_tensor_*`, profiles); everything else
works on `EngineTensor`s, so the rules (types, Triton's batch dimension, profile bounds, autocomplete) are tested
without TensorRT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.errors import invalid
from ensemble_runtime.inference import Tensor

Shape = tuple[int, ...]
ProfileShape = tuple[Shape, Shape, Shape]  # min, opt, max

# TensorRT DataType names -> numpy (BF16, FP8, INT4 have no numpy type and are refused)
_TRT_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "FLOAT": np.dtype(np.float32),
    "HALF": np.dtype(np.float16),
    "INT8": np.dtype(np.int8),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
}
_NUMPY_TO_CONFIG: dict[np.dtype[Any], int] = {
    np.dtype(np.float32): mc.TYPE_FP32,
    np.dtype(np.float16): mc.TYPE_FP16,
    np.dtype(np.int8): mc.TYPE_INT8,
    np.dtype(np.int32): mc.TYPE_INT32,
    np.dtype(np.int64): mc.TYPE_INT64,
    np.dtype(np.bool_): mc.TYPE_BOOL,
    np.dtype(np.uint8): mc.TYPE_UINT8,
}


@dataclass(frozen=True, slots=True)
class EngineTensor:
    name: str
    is_input: bool
    dtype: np.dtype[Any]
    shape: Shape  # -1 where dynamic
    profiles: tuple[ProfileShape, ...] = ()  # inputs only: (min, opt, max) per optimization profile

    @property
    def config_type(self) -> int:
        return _NUMPY_TO_CONFIG[self.dtype]


def numpy_dtype(trt_type_name: str, tensor: str) -> np.dtype[Any]:
    try:
        return _TRT_TO_NUMPY[trt_type_name]
    except KeyError:
        raise ConfigError(
            f"engine tensor '{tensor}' has TensorRT type {trt_type_name}, which has no numpy equivalent "
            f"(supported: {', '.join(sorted(_TRT_TO_NUMPY))})"
        ) from None


def _shape(dims: Any) -> Shape:
    return tuple(int(d) for d in dims)


def _enum_name(value: Any) -> str:
    return str(getattr(value, "name", value)).rsplit(".", 1)[-1]


def describe_engine(engine: Any) -> list[EngineTensor]:
    """IO tensors of a deserialized engine (TensorRT 10 named-tensor API), inputs first, in engine order."""
    tensors: list[EngineTensor] = []
    profiles = int(engine.num_optimization_profiles)
    for i in range(int(engine.num_io_tensors)):
        name = str(engine.get_tensor_name(i))
        is_input = _enum_name(engine.get_tensor_mode(name)) == "INPUT"
        if is_input and bool(getattr(engine, "is_shape_inference_io", lambda _n: False)(name)):
            raise ConfigError(f"engine input '{name}' is a shape tensor; shape-tensor inputs are not supported")
        dtype = numpy_dtype(_enum_name(engine.get_tensor_dtype(name)), name)
        shape = _shape(engine.get_tensor_shape(name))
        bounds: tuple[ProfileShape, ...] = ()
        if is_input:
            collected: list[ProfileShape] = []
            for p in range(profiles):
                low, opt, high = engine.get_tensor_profile_shape(name, p)
                collected.append((_shape(low), _shape(opt), _shape(high)))
            bounds = tuple(collected)
        tensors.append(EngineTensor(name, is_input, dtype, shape, bounds))
    return sorted(tensors, key=lambda t: not t.is_input)


def profile_max_batch(tensors: Sequence[EngineTensor], profiles: Sequence[int] | None = None) -> int:
    """The largest batch every input accepts under every given profile (all profiles when None)."""
    limits: list[int] = []
    for t in tensors:
        if not t.is_input:
            continue
        chosen = range(len(t.profiles)) if profiles is None else profiles
        limits.extend(t.profiles[p][2][0] for p in chosen if t.profiles[p][2])
    return min(limits) if limits else 0


def autocomplete(config: mc.ModelConfig, tensors: Sequence[EngineTensor]) -> mc.ModelConfig:
    """A copy with missing inputs/outputs (and max_batch_size) taken from the engine, as Triton does."""
    if config.input and config.output:
        return config
    out = mc.ModelConfig()
    out.CopyFrom(config)
    batchable = bool(tensors) and all(t.shape and t.shape[0] == -1 for t in tensors)
    explicit_no_batch = config.max_batch_size == 0 and (config.input or config.output)
    if out.max_batch_size == 0 and batchable and not explicit_no_batch:
        out.max_batch_size = max(1, profile_max_batch(tensors))
        if not out.HasField("dynamic_batching"):
            out.dynamic_batching.SetInParent()
    strip = 1 if out.max_batch_size > 0 else 0
    for is_input, field in ((True, out.input), (False, out.output)):
        if field:
            continue
        for t in tensors:
            if t.is_input == is_input:
                field.add(name=t.name, data_type=t.config_type, dims=list(t.shape[strip:]) or [1])
    return out


def check_config(config: mc.ModelConfig, tensors: Sequence[EngineTensor], profiles: Sequence[int]) -> None:
    """Refuse a config the engine cannot serve: names, types, ranks, fixed dims, and the batch dimension."""
    by_name = {t.name: t for t in tensors}
    where = f"model '{config.name}'"
    batched = config.max_batch_size > 0
    for kind, declared in (("input", config.input), ("output", config.output)):
        for tensor in declared:
            engine_tensor = by_name.get(tensor.name)
            if engine_tensor is None or engine_tensor.is_input != (kind == "input"):
                names = ", ".join(t.name for t in tensors if t.is_input == (kind == "input"))
                raise ConfigError(f"{where}: config {kind} '{tensor.name}' is not an {kind} of the engine ({names})")
            if tensor.data_type != engine_tensor.config_type:
                raise ConfigError(
                    f"{where}: {kind} '{tensor.name}' is {mc.DataType.Name(tensor.data_type)} in the config but "
                    f"{mc.DataType.Name(engine_tensor.config_type)} in the engine"
                )
            engine_dims = engine_tensor.shape
            if batched:
                if not engine_dims or engine_dims[0] != -1:
                    raise ConfigError(
                        f"{where}: max_batch_size {config.max_batch_size} needs a dynamic first dimension, but "
                        f"engine {kind} '{tensor.name}' has shape {list(engine_dims)}"
                    )
                engine_dims = engine_dims[1:]
            dims = tuple(tensor.dims)
            if tensor.HasField("reshape") or (dims == (1,) and engine_dims == ()):
                continue
            if len(dims) != len(engine_dims) or any(e != -1 and d != e for d, e in zip(dims, engine_dims, strict=True)):
                raise ConfigError(
                    f"{where}: {kind} '{tensor.name}' has dims {list(dims)} in the config but "
                    f"{list(engine_dims)} in the engine{' (after the batch dimension)' if batched else ''}"
                )
    if batched:
        limit = profile_max_batch(tensors, profiles)
        if config.max_batch_size > limit:
            raise ConfigError(
                f"{where}: max_batch_size {config.max_batch_size} exceeds the largest batch of optimization "
                f"profile(s) {', '.join(str(p) for p in profiles)} ({limit}); rebuild the plan with a larger "
                f"--max-shapes batch or lower max_batch_size"
            )


def check_request(inputs: Mapping[str, Tensor], tensors: Sequence[EngineTensor], profile: int, model: str) -> None:
    """Inputs present, of the engine's type, and within the context's optimization profile."""
    for t in tensors:
        if not t.is_input:
            continue
        array = inputs.get(t.name)
        if array is None:
            raise invalid(f"model '{model}': missing input '{t.name}'")
        if array.dtype != t.dtype:
            raise invalid(f"model '{model}': input '{t.name}' is {array.dtype}, the engine expects {t.dtype}")
        low, _, high = t.profiles[profile]
        shape = tuple(array.shape)
        if len(shape) != len(low) or any(s < lo or s > hi for s, lo, hi in zip(shape, low, high, strict=True)):
            raise invalid(
                f"model '{model}': input '{t.name}' shape {list(shape)} is outside optimization profile {profile} "
                f"(min {list(low)}, max {list(high)})"
            )
