"""Choosing ONNX Runtime execution providers from the instance group and what is installed. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

ProviderSpec = str | tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ProviderChoice:
    providers: list[ProviderSpec]
    note: str = ""  # a line for the log when the model asked for more than is available


def _wants_tensorrt(config: mc.ModelConfig) -> bool:
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    return any(a.name.lower() == "tensorrt" for a in accelerators)


def _gpu_device(config: mc.ModelConfig) -> int | None:
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            return group.gpus[0] if group.gpus else 0
    return None


def choose_providers(config: mc.ModelConfig, available: Sequence[str], cache_dir: Path | None) -> ProviderChoice:
    device = _gpu_device(config)
    if device is None:
        return ProviderChoice(["CPUExecutionProvider"])
    chosen: list[ProviderSpec] = []
    missing: list[str] = []
    if _wants_tensorrt(config):
        if "TensorrtExecutionProvider" in available:
            options: dict[str, Any] = {"device_id": device}
            if cache_dir is not None:
                options.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(cache_dir / "trt"))
            chosen.append(("TensorrtExecutionProvider", options))
        else:
            missing.append("TensorrtExecutionProvider")
    if "CUDAExecutionProvider" in available:
        chosen.append(("CUDAExecutionProvider", {"device_id": device}))
    else:
        missing.append("CUDAExecutionProvider")
    chosen.append("CPUExecutionProvider")
    note = ""
    if missing:
        note = (
            f"asked for a GPU instance group (device {device}) but {', '.join(missing)} "
            f"is not available in this onnxruntime build; falling back to "
            f"{', '.join(p if isinstance(p, str) else p[0] for p in chosen)}"
        )
    return ProviderChoice(chosen, note)
