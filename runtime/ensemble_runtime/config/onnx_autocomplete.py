"""Fill a model's inputs/outputs from its ONNX graph when the config leaves them out, as Triton does."""

from __future__ import annotations

from pathlib import Path

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError

DEFAULT_MAX_BATCH_SIZE = 4

_ONNX_TO_CONFIG: dict[int, int] = {
    onnx.TensorProto.FLOAT: mc.TYPE_FP32,
    onnx.TensorProto.UINT8: mc.TYPE_UINT8,
    onnx.TensorProto.INT8: mc.TYPE_INT8,
    onnx.TensorProto.UINT16: mc.TYPE_UINT16,
    onnx.TensorProto.INT16: mc.TYPE_INT16,
    onnx.TensorProto.INT32: mc.TYPE_INT32,
    onnx.TensorProto.INT64: mc.TYPE_INT64,
    onnx.TensorProto.STRING: mc.TYPE_STRING,
    onnx.TensorProto.BOOL: mc.TYPE_BOOL,
    onnx.TensorProto.FLOAT16: mc.TYPE_FP16,
    onnx.TensorProto.DOUBLE: mc.TYPE_FP64,
    onnx.TensorProto.UINT32: mc.TYPE_UINT32,
    onnx.TensorProto.UINT64: mc.TYPE_UINT64,
    onnx.TensorProto.BFLOAT16: mc.TYPE_BF16,
}

GraphTensor = tuple[str, int, list[int]]  # name, config data type, dims (-1 for dynamic)


def _describe(value_info: onnx.ValueInfoProto, path: Path) -> GraphTensor:
    tensor_type = value_info.type.tensor_type
    data_type = _ONNX_TO_CONFIG.get(tensor_type.elem_type)
    if data_type is None:
        raise ConfigError(f"{path}: tensor '{value_info.name}' has unsupported ONNX type {tensor_type.elem_type}")
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tensor_type.shape.dim]
    return value_info.name, data_type, dims


def read_graph_io(path: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises several types for corrupt files
        raise ConfigError(f"{path}: not a readable ONNX model ({exc})") from None
    initializers = {init.name for init in model.graph.initializer}
    inputs = [_describe(v, path) for v in model.graph.input if v.name not in initializers]
    outputs = [_describe(v, path) for v in model.graph.output]
    return inputs, outputs


def autocomplete(config: mc.ModelConfig, path: Path) -> mc.ModelConfig:
    """Return a copy with missing inputs/outputs (and batching) taken from the ONNX graph."""
    if config.input and config.output:
        return config
    inputs, outputs = read_graph_io(path)
    out = mc.ModelConfig()
    out.CopyFrom(config)
    every = inputs + outputs
    batchable = bool(every) and all(dims and dims[0] == -1 for _, _, dims in every)
    explicit_no_batch = config.max_batch_size == 0 and (config.input or config.output)
    if out.max_batch_size == 0 and batchable and not explicit_no_batch:
        out.max_batch_size = DEFAULT_MAX_BATCH_SIZE
        if not out.HasField("dynamic_batching"):
            out.dynamic_batching.SetInParent()
    strip = 1 if out.max_batch_size > 0 else 0
    if not out.input:
        for name, data_type, dims in inputs:
            out.input.add(name=name, data_type=data_type, dims=dims[strip:] or [1])
    if not out.output:
        for name, data_type, dims in outputs:
            out.output.add(name=name, data_type=data_type, dims=dims[strip:] or [1])
    return out
