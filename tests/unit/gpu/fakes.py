"""Stand-ins for `tensorrt` and cuda-python's `cudart`, injected into the TensorRT backend (no monkeypatching).

"Device" memory is host memory from ctypes, so the backend's staging, copies and bindings run for real on a CPU.
The fake engine computes y = x * k and pos = y > 0 for x FP32 [-1,4], k INT64 [-1,1], with two profiles
(batch up to 8 and up to 4).
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PLAN = b"fake-plan"


class TensorIOMode(enum.Enum):
    INPUT = 1
    OUTPUT = 2


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT64 = 2
    BOOL = 3
    BF16 = 4


@dataclass
class FakeTensor:
    name: str
    mode: TensorIOMode
    dtype: DataType
    shape: tuple[int, ...]
    profiles: list[list[tuple[int, ...]]] = field(default_factory=list)


def default_tensors() -> list[FakeTensor]:
    return [
        FakeTensor("x", TensorIOMode.INPUT, DataType.FLOAT, (-1, 4), [[(1, 4), (4, 4), (8, 4)], [(1, 4), (2, 4), (4, 4)]]),
        FakeTensor("k", TensorIOMode.INPUT, DataType.INT64, (-1, 1), [[(1, 1), (4, 1), (8, 1)], [(1, 1), (2, 1), (4, 1)]]),
        FakeTensor("y", TensorIOMode.OUTPUT, DataType.FLOAT, (-1, 4)),
        FakeTensor("pos", TensorIOMode.OUTPUT, DataType.BOOL, (-1, 4)),
    ]


class FakeEngine:
    def __init__(self, tensors: list[FakeTensor], cudart: FakeCudart) -> None:
        self.tensors = {t.name: t for t in tensors}
        self.order = [t.name for t in tensors]
        self.cudart = cudart
        self.contexts: list[FakeContext] = []

    @property
    def num_io_tensors(self) -> int:
        return len(self.order)

    @property
    def num_optimization_profiles(self) -> int:
        return max(len(t.profiles) for t in self.tensors.values())

    def get_tensor_name(self, index: int) -> str:
        return self.order[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self.tensors[name].mode

    def get_tensor_dtype(self, name: str) -> DataType:
        return self.tensors[name].dtype

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name].shape

    def get_tensor_profile_shape(self, name: str, profile: int) -> list[tuple[int, ...]]:
        return self.tensors[name].profiles[profile]

    def create_execution_context(self) -> FakeContext:
        context = FakeContext(self)
        self.contexts.append(context)
        return context


def _array(ptr: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    count = int(np.prod(shape))
    raw = (ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(ptr)
    return np.frombuffer(memoryview(raw).cast("B"), dtype=dtype, count=count).reshape(shape)


class FakeContext:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.device = engine.cudart.current_device()
        self.profile = -1
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.runs = 0

    def set_optimization_profile_async(self, profile: int, stream: int) -> bool:
        assert isinstance(stream, int)
        self.profile = profile
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return (self.shapes["x"][0], 4)

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.addresses[name] = ptr
        return True

    def execute_async_v3(self, stream: int) -> bool:
        assert self.engine.cudart.current_device() == self.device, "ran on another device than it was made on"
        batch = self.shapes["x"][0]
        x = _array(self.addresses["x"], np.float32, (batch, 4))
        k = _array(self.addresses["k"], np.int64, (batch, 1))
        y = _array(self.addresses["y"], np.float32, (batch, 4))
        pos = _array(self.addresses["pos"], np.bool_, (batch, 4))
        y[...] = x * k
        pos[...] = y > 0
        self.runs += 1
        return True


class FakeTrt:
    """The `tensorrt` names the backend uses."""

    class Logger:
        WARNING = 2

        def __init__(self, severity: int) -> None:
            self.severity = severity

    def __init__(self, cudart: FakeCudart, tensors: list[FakeTensor] | None = None) -> None:
        self.cudart = cudart
        self.tensors = tensors or default_tensors()
        self.engines: list[FakeEngine] = []
        self.__version__ = "10.fake"
        outer = self

        class Runtime:
            def __init__(self, logger: Any) -> None:
                self.logger = logger

            def deserialize_cuda_engine(self, plan: bytes) -> FakeEngine | None:
                if plan != PLAN:
                    return None
                engine = FakeEngine(outer.tensors, outer.cudart)
                outer.engines.append(engine)
                return engine

        self.Runtime = Runtime


class FakeStream:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __int__(self) -> int:
        return self.handle


class FakeCudart:
    """cudart's (error, value) convention; memory is ctypes buffers; the current device is per thread."""

    class cudaMemcpyKind:
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    def __init__(self, devices: int = 2, malloc_limit: int = 1 << 30) -> None:
        import threading

        self.devices = devices
        self.malloc_limit = malloc_limit
        self.live: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.streams = 0
        self._local = threading.local()

    def current_device(self) -> int:
        return int(getattr(self._local, "device", 0))

    def cudaGetErrorString(self, status: int) -> tuple[int, bytes]:
        return 0, {2: b"out of memory", 100: b"no CUDA-capable device is detected"}.get(int(status), b"error")

    def cudaSetDevice(self, device: int) -> tuple[int]:
        if device >= self.devices:
            return (101,)
        self._local.device = device
        return (0,)

    def cudaGetDeviceCount(self) -> tuple[int, int]:
        return (0, self.devices) if self.devices else (100, 0)

    def cudaStreamCreate(self) -> tuple[int, FakeStream]:
        self.streams += 1
        return 0, FakeStream(1000 + self.streams)

    def cudaStreamDestroy(self, stream: Any) -> tuple[int]:
        self.streams -= 1
        return (0,)

    def cudaStreamSynchronize(self, stream: Any) -> tuple[int]:
        return (0,)

    def _alloc(self, size: int) -> tuple[int, int]:
        if size > self.malloc_limit:
            return 2, 0
        buffer = ctypes.create_string_buffer(size)
        self.live[ctypes.addressof(buffer)] = buffer
        return 0, ctypes.addressof(buffer)

    def cudaMalloc(self, size: int) -> tuple[int, int]:
        return self._alloc(size)

    def cudaMallocHost(self, size: int) -> tuple[int, int]:
        return self._alloc(size)

    def cudaFree(self, ptr: int) -> tuple[int]:
        del self.live[ptr]
        return (0,)

    cudaFreeHost = cudaFree

    def cudaMemcpyAsync(self, dst: int, src: int, count: int, kind: int, stream: Any) -> tuple[int]:
        assert dst in self.live and src in self.live, "copies go between allocated buffers"
        ctypes.memmove(dst, src, count)
        return (0,)
