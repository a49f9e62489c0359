"""The few CUDA runtime calls the TensorRT backend needs, through cuda-python's `cudart`, imported lazily.

Why cuda-python: it is NVIDIA's own thin binding (no torch, no pycuda build step), and the TensorRT 10 Python
samples use it. Every call returns (error, *values); `CudaRuntime.call` turns a non-zero error into an exception
that names the call and CUDA's message.
"""

from __future__ import annotations

import ctypes
import importlib
from typing import Any

import numpy as np
import numpy.typing as npt

_MODULES = ("cuda.bindings.runtime", "cuda.cudart")  # cuda-python >= 12.6, then older releases
MISSING = "the cuda-python package is not installed in this runtime image; install the gpu extra"
_MIN_ALLOC = 256


class CudaError(RuntimeError):
    pass


def load_cudart() -> Any:
    for name in _MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(MISSING)


class CudaRuntime:
    def __init__(self, cudart: Any) -> None:
        self.rt = cudart

    def call(self, what: str, result: Any) -> Any:
        """Check a cudart result tuple; return its value (None, one value, or a tuple of them)."""
        status, *values = result if isinstance(result, tuple) else (result,)
        if int(status) != 0:
            _, message = self.rt.cudaGetErrorString(status)
            text = message.decode() if isinstance(message, bytes) else str(message)
            raise CudaError(f"{what} failed: {text} (cudaError {int(status)})")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def set_device(self, device: int) -> None:
        self.call(f"cudaSetDevice({device})", self.rt.cudaSetDevice(device))

    def device_count(self) -> int:
        return int(self.call("cudaGetDeviceCount", self.rt.cudaGetDeviceCount()))

    def mem_get_info(self) -> tuple[int, int]:
        free, total = self.call("cudaMemGetInfo", self.rt.cudaMemGetInfo())
        return int(free), int(total)

    def create_stream(self) -> Any:
        return self.call("cudaStreamCreate", self.rt.cudaStreamCreate())

    def destroy_stream(self, stream: Any) -> None:
        self.call("cudaStreamDestroy", self.rt.cudaStreamDestroy(stream))

    def synchronize(self, stream: Any) -> None:
        self.call("cudaStreamSynchronize", self.rt.cudaStreamSynchronize(stream))

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.call("cudaMemcpyAsync(host->device)", self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream))

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.call("cudaMemcpyAsync(device->host)", self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream))


class DeviceBuffer:
    """Device memory that grows to the largest request seen (requests within a profile's bounds)."""

    def __init__(self, cuda: CudaRuntime) -> None:
        self._cuda = cuda
        self.ptr = 0
        self.nbytes = 0

    def ensure(self, nbytes: int) -> int:
        if nbytes > self.nbytes:
            self.free()
            size = max(_MIN_ALLOC, nbytes)
            self.ptr = int(self._cuda.call(f"cudaMalloc({size})", self._cuda.rt.cudaMalloc(size)))
            self.nbytes = size
        return self.ptr

    def free(self) -> None:
        if self.ptr:
            self._cuda.call("cudaFree", self._cuda.rt.cudaFree(self.ptr))
            self.ptr, self.nbytes = 0, 0


class PinnedBuffer:
    """Page-locked host memory (so copies are truly asynchronous), seen from numpy as a typed view."""

    def __init__(self, cuda: CudaRuntime) -> None:
        self._cuda = cuda
        self.ptr = 0
        self.nbytes = 0

    def ensure(self, nbytes: int) -> int:
        if nbytes > self.nbytes:
            self.free()
            size = max(_MIN_ALLOC, nbytes)
            self.ptr = int(self._cuda.call(f"cudaMallocHost({size})", self._cuda.rt.cudaMallocHost(size)))
            self.nbytes = size
        return self.ptr

    def view(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        self.ensure(nbytes)
        raw = memoryview((ctypes.c_char * self.nbytes).from_address(self.ptr)).cast("B")
        return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape)

    def free(self) -> None:
        if self.ptr:
            self._cuda.call("cudaFreeHost", self._cuda.rt.cudaFreeHost(self.ptr))
            self.ptr, self.nbytes = 0, 0
