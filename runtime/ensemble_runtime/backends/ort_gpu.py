"""ONNX Runtime on GPUs: CUDA / TensorRT provider options and an IO-binding run, for onnxruntime_backend to call.

Pure apart from `io_binding_run`, which takes the session it runs; nothing here imports onnxruntime.
Triton's accelerator parameters are honoured: `gpu_execution_accelerator { name: "tensorrt" parameters {
precision_mode: "FP16", max_workspace_size_bytes: "...", trt_engine_cache_path: "..." } }`; a
`trt_engine_cache_path` is a relative directory under the runtime's cache for that model version (never a
path of the config author's choosing, see config/paths.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.config.paths import TRT_CACHE_PARAMETER, confined
from ensemble_runtime.inference import Tensor

ProviderOptions = dict[str, Any]

TRT_PROVIDER = "TensorrtExecutionProvider"
# onnxruntime's TensorRT provider, in onnxruntime/capi/: onnxruntime-gpu ships it (and lists TRT_PROVIDER) whether or
# not TensorRT is installed; it loads only where TensorRT's libnvinfer does.
TRT_PROVIDER_LIBRARY = "libonnxruntime_providers_tensorrt.so"


def trt_cache_dir(cache_dir: Path, model: str, version: int) -> Path:
    """Where ORT's TensorRT EP keeps built engines for one model version: rebuilt only when the model changes."""
    return cache_dir / "ort-trt" / model / str(version)


def cuda_options(device_id: int, *, gpu_mem_limit: int | None = None, conv_search: str = "HEURISTIC") -> ProviderOptions:
    """CUDAExecutionProvider options: copies on the compute stream, arena grown by request, heuristic cuDNN."""
    options: ProviderOptions = {
        "device_id": device_id,
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": conv_search,
        "do_copy_in_default_stream": True,
    }
    if gpu_mem_limit:
        options["gpu_mem_limit"] = gpu_mem_limit
    return options


def _trt_parameters(config: mc.ModelConfig) -> Mapping[str, str]:
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accelerator.name.lower() == "tensorrt":
            return dict(accelerator.parameters)
    return {}


def tensorrt_options(config: mc.ModelConfig, device_id: int, cache_dir: Path | None, version: int) -> ProviderOptions:
    """TensorrtExecutionProvider options from the config's tensorrt accelerator parameters (Triton's names)."""
    params = _trt_parameters(config)
    options: ProviderOptions = {"device_id": device_id}
    precision = params.get("precision_mode", "FP32").upper()
    if precision not in ("FP32", "FP16", "INT8"):
        raise ConfigError(f"model '{config.name}': tensorrt precision_mode '{precision}' is not FP32, FP16 or INT8")
    options["trt_fp16_enable"] = precision in ("FP16", "INT8")
    options["trt_int8_enable"] = precision == "INT8"
    if "max_workspace_size_bytes" in params:
        value = params["max_workspace_size_bytes"]
        if not value.isdigit():
            raise ConfigError(f"model '{config.name}': max_workspace_size_bytes '{value}' is not a byte count")
        options["trt_max_workspace_size"] = int(value)
    cache = ""
    if cache_dir is not None:
        base = trt_cache_dir(cache_dir, config.name, version)
        given = params.get(TRT_CACHE_PARAMETER, "")
        field = f"gpu_execution_accelerator 'tensorrt' parameter {TRT_CACHE_PARAMETER}"
        cache = str(confined(base, given, field, config.name, within=base) if given else base)
    if cache and params.get("trt_engine_cache_enable", "true").lower() != "false":
        options.update(
            trt_engine_cache_enable=True,
            trt_engine_cache_path=cache,
            trt_timing_cache_enable=True,
            trt_timing_cache_path=cache,
        )
    return options


def wants_tensorrt(config: mc.ModelConfig) -> bool:
    """Whether the config asks for the `tensorrt` GPU execution accelerator."""
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    return any(a.name.lower() == "tensorrt" for a in accelerators)


def gpu_provider_list(config: mc.ModelConfig, available: Sequence[str], device_id: int, cache_dir: Path | None,
                      version: int, *, unloadable: Mapping[str, str] | None = None,
                      ) -> tuple[list[str | tuple[str, ProviderOptions]], str]:
    """Providers for a GPU instance on `device_id`, best first, and a log note naming what is missing.

    `unloadable` maps providers the build lists but cannot load here to why (TRT_PROVIDER without TensorRT): they
    are left out, so onnxruntime never falls back on its own (its retry drops every provider option, the device
    among them).
    """
    chosen: list[str | tuple[str, ProviderOptions]] = []
    missing: list[str] = []
    problems: list[str] = []
    if wants_tensorrt(config):
        reason = (unloadable or {}).get(TRT_PROVIDER)
        if TRT_PROVIDER in available and reason is None:
            chosen.append((TRT_PROVIDER, tensorrt_options(config, device_id, cache_dir, version)))
        elif TRT_PROVIDER in available:
            problems.append(f"{TRT_PROVIDER} cannot load TensorRT ({reason}; install the tensorrt extra)")
        else:
            missing.append(TRT_PROVIDER)
    if "CUDAExecutionProvider" in available:
        chosen.append(("CUDAExecutionProvider", cuda_options(device_id)))
    else:
        missing.append("CUDAExecutionProvider")
    chosen.append("CPUExecutionProvider")
    if missing:
        problems.insert(0, f"{', '.join(missing)} is not available in this onnxruntime build (install the gpu extra: "
                           f"onnxruntime-gpu)")
    note = ""
    if problems:
        names = ", ".join(p if isinstance(p, str) else p[0] for p in chosen)
        note = f"model '{config.name}' asked for GPU {device_id} but {'; '.join(problems)}; falling back to {names}"
    return chosen, note


def bindable(inputs: Mapping[str, Tensor]) -> bool:
    """IO binding takes numeric tensors; BYTES (object arrays) go through session.run."""
    return all(array.dtype != np.object_ for array in inputs.values())


def io_binding_run(session: Any, inputs: Mapping[str, Tensor], outputs: Sequence[str], device: str = "cuda",
                   device_id: int = 0) -> dict[str, Tensor]:
    """Run with inputs bound from host memory and outputs allocated by ORT on `device`, then copied back.

    Saves ORT's per-run output allocation on the host and lets the CUDA EP copy on its own stream; with
    `device="cpu"` it is the same call on the CPU provider (what the unit tests run).
    """
    binding = session.io_binding()
    for name, array in inputs.items():
        binding.bind_cpu_input(name, np.ascontiguousarray(array))
    for name in outputs:
        binding.bind_output(name, device, device_id)
    session.run_with_iobinding(binding)
    values = binding.copy_outputs_to_cpu()
    return {name: np.asarray(value) for name, value in zip(outputs, values, strict=True)}
