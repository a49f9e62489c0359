"""TensorRT backend: serialized engines (`model.plan`), one execution context per instance, one CUDA stream each.

Contexts on a device share that device's engine; each runs in its own thread (CUDA's current device is per thread)
with page-locked staging buffers, so host<->device copies and the engine run asynchronously on its stream.
`tensorrt` and `cuda-python` are imported when a model is loaded, never at import time.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.backends.base import LoadContext, ModelInitError, ModelInstance
from ensemble_runtime.backends.trt_engine import (
    EngineTensor,
    autocomplete,
    check_config,
    check_request,
    describe_engine,
)
from ensemble_runtime.config import paths
from ensemble_runtime.config.model_config import ConfigError, model_filename
from ensemble_runtime.errors import InferenceError, internal
from ensemble_runtime.gpu.cuda import MISSING as CUDA_MISSING
from ensemble_runtime.gpu.cuda import CudaRuntime, DeviceBuffer, PinnedBuffer, load_cudart
from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.gpu.placement import Slot, choose_profile, place_instances
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor, run_merged

log = logging.getLogger(__name__)

TRT_MISSING = (
    "the tensorrt package is not installed in this runtime image; install the tensorrt extra "
    "(the GPU image: make images GPU=1 TENSORRT=1)"
)


def import_tensorrt() -> Any:
    try:
        return importlib.import_module("tensorrt")
    except ImportError:
        raise ConfigError(TRT_MISSING) from None


def import_modules() -> tuple[Any, CudaRuntime]:
    """(tensorrt, CUDA runtime), or ConfigError saying which package this image lacks."""
    trt = import_tensorrt()
    try:
        return trt, CudaRuntime(load_cudart())
    except ImportError:
        raise ConfigError(CUDA_MISSING) from None


def cuda_inventory(cuda: CudaRuntime) -> GpuInventory:
    """GPUs as CUDA numbers them for this process (CUDA_VISIBLE_DEVICES already applied by the driver)."""
    try:
        count = cuda.device_count()
    except Exception as exc:
        return GpuInventory((), f"cudaGetDeviceCount: {exc}")
    return GpuInventory(tuple(str(i) for i in range(count)), f"cudaGetDeviceCount reports {count} GPU(s)")


class TrtContext:
    """One execution context: its stream, optimization profile and buffers. Used from one thread only."""

    def __init__(self, cuda: CudaRuntime, loaded: tuple[Any, Any], tensors: Sequence[EngineTensor], device: int,
                 profile: int, model: str) -> None:
        self._cuda = cuda
        self._loaded = loaded  # (runtime, engine): both outlive the context
        engine = loaded[1]
        self._tensors = list(tensors)
        self.device = device
        self.profile = profile
        self._model = model
        cuda.set_device(device)
        self._stream = cuda.create_stream()
        self._stream_handle = int(self._stream)
        self._context = engine.create_execution_context()
        if self._context is None:
            cuda.destroy_stream(self._stream)
            raise ModelInitError(f"model '{model}': TensorRT could not create an execution context on GPU {device} "
                              "(out of device memory?)")
        if not self._context.set_optimization_profile_async(profile, self._stream_handle):
            cuda.destroy_stream(self._stream)
            raise ModelInitError(f"model '{model}': cannot select optimization profile {profile} on GPU {device}")
        cuda.synchronize(self._stream)
        self._device = {t.name: DeviceBuffer(cuda) for t in tensors}
        self._host = {t.name: PinnedBuffer(cuda) for t in tensors}

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        cuda, context, stream = self._cuda, self._context, self._stream_handle
        check_request(inputs, self._tensors, self.profile, self._model)
        cuda.set_device(self.device)
        outputs: list[tuple[EngineTensor, tuple[int, ...]]] = []
        for t in self._tensors:
            if t.is_input:
                array = inputs[t.name]
                if not context.set_input_shape(t.name, tuple(array.shape)):
                    raise internal(f"model '{self._model}': TensorRT refused shape {list(array.shape)} for '{t.name}'")
                staged = self._host[t.name].view(t.dtype, tuple(array.shape))
                np.copyto(staged, array, casting="no")
                device_ptr = self._device[t.name].ensure(staged.nbytes)
                cuda.copy_to_device(device_ptr, self._host[t.name].ptr, staged.nbytes, stream)
                context.set_tensor_address(t.name, device_ptr)
        for t in self._tensors:
            if not t.is_input:
                shape = tuple(int(d) for d in context.get_tensor_shape(t.name))
                if any(d < 0 for d in shape):
                    raise internal(f"model '{self._model}': output '{t.name}' has a data-dependent shape "
                                   f"{list(shape)}, which this backend does not support")
                nbytes = int(np.prod(shape, dtype=np.int64)) * t.dtype.itemsize
                context.set_tensor_address(t.name, self._device[t.name].ensure(nbytes))
                outputs.append((t, shape))
        if not context.execute_async_v3(stream):
            raise internal(f"model '{self._model}': TensorRT execution failed on GPU {self.device} (see the log)")
        results: dict[str, Tensor] = {}
        for t, shape in outputs:
            staged = self._host[t.name].view(t.dtype, shape)
            cuda.copy_to_host(self._host[t.name].ptr, self._device[t.name].ptr, staged.nbytes, stream)
            results[t.name] = staged
        cuda.synchronize(self._stream)
        return {name: value.copy() for name, value in results.items()}  # staging buffers are reused

    def close(self) -> None:
        self._cuda.set_device(self.device)
        self._cuda.synchronize(self._stream)
        self._context = None
        for device_buffer in self._device.values():
            device_buffer.free()
        for host_buffer in self._host.values():
            host_buffer.free()
        self._cuda.destroy_stream(self._stream)


class TensorRTInstance:
    """Runs its context from a dedicated thread; requests of a batch run as one merged call."""

    def __init__(self, context: TrtContext, pool: ThreadPoolExecutor, batched: bool) -> None:
        self._context = context
        self._pool = pool
        self._batched = batched

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        loop = asyncio.get_running_loop()
        if len(requests) == 1 or not self._batched:
            results: list[BackendResult] = []
            for request in requests:
                try:
                    results.append(await loop.run_in_executor(self._pool, self._run, request.inputs))
                except Exception as exc:
                    results.append(exc)
            return results
        try:
            return await loop.run_in_executor(self._pool, run_merged, self._run, requests)
        except Exception as exc:
            return [exc] * len(requests)

    def _run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        try:
            return self._context.run(inputs)
        except InferenceError:
            raise
        except Exception as exc:
            raise internal(f"TensorRT failed on GPU {self._context.device}: {type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self._context.close)
        finally:
            self._pool.shutdown(wait=False)


class TensorRTBackend:
    """Backend name `tensorrt` (platform `tensorrt_plan`).

    `inventory` overrides GPU discovery (default: cudaGetDeviceCount); `modules` supplies (tensorrt, CudaRuntime)
    (default: import them), which is how tests run the whole backend against fakes.
    """

    name = "tensorrt"

    def __init__(self, inventory: Callable[[], GpuInventory] | None = None,
                 modules: Callable[[], tuple[Any, CudaRuntime]] = import_modules) -> None:
        self._inventory = inventory
        self._modules = modules

    def prepare_config(self, config: mc.ModelConfig, version_path: Path) -> mc.ModelConfig:
        path = paths.model_file(config, version_path, model_filename(config))
        if not path.is_file():
            raise ConfigError(f"model '{config.name}' version {version_path.name}: plan file '{path.name}' not found")
        if config.input and config.output:
            return config
        try:
            trt, cuda = self._modules()
            cuda.set_device(0)
            _, engine = _deserialize(trt, path.read_bytes())
            tensors = describe_engine(engine)
        except Exception as exc:  # no tensorrt, no GPU: keep the config, load reports the reason
            log.info("model '%s': inputs/outputs not autocompleted from %s (%s)", config.name, path.name, exc)
            return config
        return autocomplete(config, tensors)

    async def load(self, context: LoadContext) -> list[ModelInstance]:
        config = context.config
        where = f"model '{config.name}' version {context.version}"
        try:
            trt, cuda = self._modules()
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        inventory = self._inventory() if self._inventory is not None else cuda_inventory(cuda)
        placement = place_instances(config, inventory, backend=self.name, needs_gpu=True)
        plan = paths.model_file(config, context.version_path, model_filename(config)).read_bytes()
        instances: list[TensorRTInstance] = []
        try:
            for device in placement.devices:
                instances.extend(await self._load_device(trt, cuda, plan, config, device, placement.on(device)))
        except BaseException:
            for instance in instances:
                await instance.close()
            raise
        log.info("%s: %d TensorRT context(s) on GPU(s) %s", where, len(instances),
                 ", ".join(str(d) for d in placement.devices))
        return list(instances)

    async def _load_device(self, trt: Any, cuda: CudaRuntime, plan: bytes, config: mc.ModelConfig, device: int,
                           slots: Sequence[Slot]) -> list[TensorRTInstance]:
        loop = asyncio.get_running_loop()
        pools = [ThreadPoolExecutor(1, thread_name_prefix=f"trt-{config.name}-gpu{device}") for _ in slots]

        def deserialize() -> tuple[Any, Any]:
            cuda.set_device(device)
            return _deserialize(trt, plan)

        instances: list[TensorRTInstance] = []
        try:
            runtime, engine = await loop.run_in_executor(pools[0], deserialize)
            tensors = describe_engine(engine)
            profiles = [choose_profile(slot, i, int(engine.num_optimization_profiles)) for i, slot in enumerate(slots)]
            check_config(config, tensors, sorted(set(profiles)))
            for pool, profile in zip(pools, profiles, strict=True):
                make = functools.partial(TrtContext, cuda, (runtime, engine), tensors, device, profile, config.name)
                ctx = await loop.run_in_executor(pool, make)
                instances.append(TensorRTInstance(ctx, pool, config.max_batch_size > 0))
        except BaseException:
            for instance in instances:
                await instance.close()
            for pool in pools[len(instances) :]:
                pool.shutdown(wait=False)
            raise
        return instances


def _deserialize(trt: Any, plan: bytes) -> tuple[Any, Any]:
    """(runtime, engine): the runtime is kept as long as the engine, as TensorRT asks."""
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise ConfigError(
            "TensorRT cannot deserialize the plan: it was built by another TensorRT version or for another GPU "
            f"model (this runtime has TensorRT {getattr(trt, '__version__', '?')}); rebuild it with "
            "ensemble-build-plan on this image"
        )
    return runtime, engine
