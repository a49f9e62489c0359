"""GPU-only tests: each fixture skips, with the reason, when its part of the GPU stack is missing."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest
from ensemble_runtime.gpu.cuda import CudaRuntime, load_cudart


def _cuda_gpus() -> tuple[int, str]:
    try:
        cuda = CudaRuntime(load_cudart())
        count = cuda.device_count()
    except Exception as exc:  # ImportError without cuda-python, CudaError without a driver or device
        return 0, f"no usable GPU: {exc}"
    return count, "" if count else "no GPU visible"


@pytest.fixture(scope="session")
def cuda() -> CudaRuntime:
    count, reason = _cuda_gpus()
    if not count:
        pytest.skip(reason)
    return CudaRuntime(load_cudart())


@pytest.fixture(scope="session")
def trt(cuda: CudaRuntime) -> Any:
    if importlib.util.find_spec("tensorrt") is None:
        pytest.skip("tensorrt is not installed (tensorrt extra)")
    return importlib.import_module("tensorrt")


@pytest.fixture(scope="session")
def ort_cuda(cuda: CudaRuntime) -> Any:
    ort = importlib.import_module("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu from the gpu extra)")
    return ort
