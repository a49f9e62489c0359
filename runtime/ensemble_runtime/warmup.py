"""Warm-up requests for a new model version: the config's `model_warmup`, or one built from its inputs. Pure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, backend_of
from ensemble_runtime.config.paths import warmup_file
from ensemble_runtime.dtypes import config_to_wire, wire_to_numpy
from ensemble_runtime.inference import BackendRequest, Tensor


class WarmupError(ConfigError):
    """A warm-up request of a freshly loaded version failed. A ConfigError for its callers, on purpose: the
    version is UNAVAILABLE with this message, as for a config refused at load (Triton does the same)."""


# Backends whose models accept any well-typed tensor; a Python model may need real data (an image,
# a sentence), so it is warmed up only when its config says how (model_warmup), as in Triton.
_SYNTHESIZED_FOR = frozenset({"onnxruntime", "tensorrt"})


def _tensor(data_type: int, shape: list[int], kind: str, rng: np.random.Generator, data_file: Path | None) -> Tensor:
    wire = config_to_wire(mc.DataType.Name(data_type))
    count = math.prod(shape)
    if wire == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = [b"\x00" * 4] * count if kind == "random" else [b""] * count
        return array.reshape(shape)
    dtype = wire_to_numpy(wire)
    if data_file is not None:
        raw = data_file.read_bytes()
        return np.frombuffer(raw[: count * dtype.itemsize], dtype=dtype).reshape(shape)
    if kind == "random":
        if dtype.kind == "f":
            return rng.random(shape).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, shape).astype(dtype)
        return rng.integers(0, 8, shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def warmup_requests(config: mc.ModelConfig, version_path: Path) -> list[BackendRequest]:
    """The requests to run on a new version before it may take traffic (empty when there are none)."""
    rng = np.random.default_rng(0)
    requests: list[BackendRequest] = []
    batching = config.max_batch_size > 0
    outputs = tuple(o.name for o in config.output)
    for sample in config.model_warmup:
        batch = max(1, sample.batch_size)
        inputs: dict[str, Tensor] = {}
        for name, spec in sample.inputs.items():
            shape = ([batch] if batching else []) + [max(1, int(d)) for d in spec.dims]
            kind = spec.WhichOneof("input_data_type") or "zero_data"
            data_file = None
            if kind == "input_data_file":
                field = f"model_warmup '{sample.name}' input '{name}' input_data_file"
                data_file = warmup_file(config, version_path.parent, spec.input_data_file, field)
                if not data_file.is_file():
                    raise ConfigError(f"model '{config.name}': warmup sample '{sample.name}' file {data_file} not found")
            inputs[name] = _tensor(spec.data_type, shape, "random" if kind == "random_data" else "zero", rng, data_file)
        for _ in range(max(1, sample.count)):
            requests.append(BackendRequest(inputs, outputs, {}, f"warmup:{sample.name}"))
    if requests or backend_of(config) not in _SYNTHESIZED_FOR or not config.input:
        return requests
    inputs = {}
    for tensor in config.input:
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        shape = ([1] if batching else []) + [max(1, int(d)) for d in dims]
        inputs[tensor.name] = _tensor(tensor.data_type, shape, "zero", rng, None)
    return [BackendRequest(inputs, outputs, {}, "warmup:synthesized")]
