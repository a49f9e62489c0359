"""CUDA shared memory: device allocations another process shares through a cudaIpc handle, via cuda-python.

`CudaIpcOpener` is the registry's `cuda_opener`: it loads cudart (lazily; without cuda-python or a GPU every
registration is refused with a clear error), opens the handle on the device, checks the client's byte size
against the allocation's real size (cuMemGetAddressRange), and returns a `CudaIpcMapping` whose reads and
writes are synchronous copies between the device and host memory. Triton answers a handle it cannot open with
INVALID_ARGUMENT `failed to register shared memory region: invalid args` and logs the CUDA error; so do we.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
from typing import Any

import numpy as np

from ensemble_runtime.errors import invalid, quote_name, unavailable
from ensemble_runtime.gpu.cuda import CudaError, CudaRuntime, load_cudart

log = logging.getLogger(__name__)
HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_DRIVER_MODULES = ("cuda.bindings.driver", "cuda.cuda")


def _load_driver() -> Any:
    for name in _DRIVER_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("cuda-python's driver bindings are not installed")


class CudaIpcMapping:
    """An opened IPC allocation of `size` bytes at device pointer `ptr`; closed once, never used after."""

    def __init__(self, cuda: CudaRuntime, ptr: int, size: int, device_id: int) -> None:
        self._cuda, self.ptr, self.size, self.device_id = cuda, ptr, size, device_id
        self._lock = threading.Lock()
        self._closed = False

    def _live(self) -> None:
        if self._closed:
            raise unavailable("the CUDA shared memory region was unregistered while the request used it")

    def read(self, offset: int, size: int) -> bytes:
        out = np.empty(size, dtype=np.uint8)
        with self._lock:
            self._live()
            self._cuda.set_device(self.device_id)
            kind = self._cuda.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
            self._cuda.call("cudaMemcpy(device->host)", self._cuda.rt.cudaMemcpy(out.ctypes.data, self.ptr + offset, size, kind))
        return out.tobytes()

    def write(self, offset: int, data: memoryview) -> None:
        host = np.frombuffer(data, dtype=np.uint8)
        with self._lock:
            self._live()
            self._cuda.set_device(self.device_id)
            kind = self._cuda.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
            self._cuda.call("cudaMemcpy(host->device)", self._cuda.rt.cudaMemcpy(self.ptr + offset, host.ctypes.data, host.nbytes, kind))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._cuda.set_device(self.device_id)
                self._cuda.call("cudaIpcCloseMemHandle", self._cuda.rt.cudaIpcCloseMemHandle(self.ptr))
            except CudaError:
                log.exception("closing a CUDA IPC handle failed")


class CudaIpcOpener:
    """Opens cudaIpc handles; cudart and the driver API are loaded on first use."""

    def __init__(self) -> None:
        self._cuda: CudaRuntime | None = None
        self._driver: Any = None
        self._lock = threading.Lock()

    def _runtime(self, name: str) -> tuple[CudaRuntime, Any]:
        with self._lock:
            if self._cuda is None:
                try:
                    self._cuda, self._driver = CudaRuntime(load_cudart()), _load_driver()
                except ImportError as exc:
                    raise invalid(
                        f"failed to register CUDA shared memory region {quote_name(name)}: GPUs not supported ({exc})"
                    ) from None
            return self._cuda, self._driver

    def __call__(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaIpcMapping:
        if len(raw_handle) != HANDLE_BYTES:
            raise invalid("failed to register shared memory region: invalid args")
        cuda, driver = self._runtime(name)
        handle = cuda.rt.cudaIpcMemHandle_t()
        ctypes.memmove(handle.getPtr(), raw_handle, HANDLE_BYTES)
        try:
            cuda.set_device(device_id)
            flags = cuda.rt.cudaIpcMemLazyEnablePeerAccess
            ptr = int(cuda.call("cudaIpcOpenMemHandle", cuda.rt.cudaIpcOpenMemHandle(handle, flags)))
        except CudaError as exc:
            log.error("failed to open CUDA IPC handle: %s", exc)
            raise invalid("failed to register shared memory region: invalid args") from None
        mapping = CudaIpcMapping(cuda, ptr, byte_size, device_id)
        status, _base, size = driver.cuMemGetAddressRange(driver.CUdeviceptr(ptr))
        if int(status) != 0 or byte_size > int(size):
            mapping.close()
            raise invalid(f"failed to register shared memory region {quote_name(name)}: invalid args")
        return mapping
