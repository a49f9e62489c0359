"""ONNX Runtime backend: one session per model version, `instance_group` count parallel executions."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.backends.base import LoadContext, ModelInitError, ModelInstance
from ensemble_runtime.backends.handoff import deliver
from ensemble_runtime.backends.ort_gpu import (
    TRT_PROVIDER,
    TRT_PROVIDER_LIBRARY,
    ProviderOptions,
    bindable,
    gpu_provider_list,
    io_binding_run,
    wants_tensorrt,
)
from ensemble_runtime.backends.ort_options import thread_options, usable_cpus
from ensemble_runtime.config import onnx_autocomplete, paths
from ensemble_runtime.config.model_config import ConfigError, model_filename
from ensemble_runtime.errors import InferenceError, internal, invalid, quote_name
from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.gpu.nvml import detect_gpus
from ensemble_runtime.gpu.placement import place_instances
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor, run_merged

ProviderSpec = str | tuple[str, ProviderOptions]

log = logging.getLogger(__name__)
T = TypeVar("T")


INLINE_BELOW_S = 0.0002  # executions this short run on the event loop: cheaper than two thread hand-offs
_EWMA_WEIGHT = 0.2


class OnnxInstance:
    """Executes on a shared session; requests in a batch run as one merged call.

    Where an execution runs is decided by how long executions take (a moving average): a model that runs
    in microseconds runs on the event loop, since handing it to a thread and back costs more (and ORT's own
    threads do the heavy work anyway); anything slower runs on the instance's pool thread, so the loop
    stays responsive. The first executions always go to the pool.
    """

    def __init__(
        self, session: ort.InferenceSession, pool: ThreadPoolExecutor, name: str, batched: bool, gpu: int | None = None
    ) -> None:
        self._session = session
        self._pool = pool
        self._name = name
        self._batched = batched
        self._gpu = gpu  # CUDA device of a GPU session: run with IO binding
        self._outputs = [o.name for o in session.get_outputs()]
        # numeric tensors only, in and out: ORT takes and gives numpy arrays as they are (no STRING conversion)
        self._plain_in = all(_numeric(i.type) for i in session.get_inputs())
        self._plain_out = all(_numeric(o.type) for o in session.get_outputs())
        self._typical_s = 1.0  # moving average of execution time; starts high: the pool until measured
        # A CPU session's run without the Python wrapper around it (`InferenceSession.run` checks the feed's names,
        # which `validation.check_inputs` checked against the config already, and retries on another provider
        # only where a GPU one failed): a few microseconds less per request. None: the wrapper's run.
        self._run_direct = _direct_run(session) if gpu is None else None

    def runs_inline(self) -> bool:
        """Whether an execution now runs on the caller's thread (the loop): the model is fast enough."""
        return self._typical_s < INLINE_BELOW_S

    def execute_inline(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """`execute` on the caller's thread, wherever `runs_inline` says: one result per request."""
        if self._plain_in:  # no STRING input: nothing to check
            return self._run_all(requests)
        refused = {i: err for i, r in enumerate(requests) if (err := _not_utf8(r.inputs)) is not None}
        if refused:  # only those requests fail; the others of the batch run
            good = [r for i, r in enumerate(requests) if i not in refused]
            results = iter(self._run_all(good) if good else [])
            return [refused[i] if i in refused else next(results) for i in range(len(requests))]
        return self._run_all(requests)

    def execute_one(self, request: BackendRequest) -> BackendResult:
        """`execute_inline` for one request, as `_run_all` runs each: its outputs, or the error as its result."""
        inputs = request.inputs
        if not self._plain_in:
            refused = _not_utf8(inputs)
            if refused is not None:
                return refused
        try:
            return self._run(inputs)
        except Exception as exc:
            return exc

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if self.runs_inline():
            return self.execute_inline(requests)
        return await _on_pool(asyncio.get_running_loop(), self._pool, self.execute_inline, requests)

    def _run_all(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if len(requests) == 1 or not self._batched:
            results: list[BackendResult] = []
            for request in requests:
                try:
                    results.append(self._run(request.inputs))
                except Exception as exc:
                    results.append(exc)
            return results
        try:
            # self._run is timed: a merged batch that takes long sends the next ones to the pool
            return run_merged(self._run, requests)
        except Exception as exc:
            return [exc] * len(requests)

    def _run(self, inputs: Any) -> dict[str, Tensor]:
        started = time.perf_counter()
        try:
            return self._run_session(inputs)
        finally:
            self._typical_s += _EWMA_WEIGHT * (time.perf_counter() - started - self._typical_s)

    def _run_session(self, inputs: Any) -> dict[str, Tensor]:
        feeds = dict(inputs) if self._plain_in else {name: _to_ort(array) for name, array in inputs.items()}
        try:
            if self._gpu is not None and bindable(feeds):
                return io_binding_run(self._session, feeds, self._outputs, "cuda", self._gpu)
            if self._run_direct is not None:
                values = self._run_direct(self._outputs, feeds, None)
            else:
                values = self._session.run(self._outputs, feeds)
        except Exception as exc:
            raise internal(f"onnxruntime failed running model '{self._name}': {exc}") from None
        if self._plain_out:  # numpy arrays already
            return dict(zip(self._outputs, values, strict=True))
        return {name: _from_ort(value) for name, value in zip(self._outputs, values, strict=True)}

    async def close(self) -> None:
        return None


def _direct_run(session: ort.InferenceSession) -> Callable[[list[str], dict[str, Any], Any], list[Any]] | None:
    """The compiled session's `run` under `session.run`, for a session on the CPU provider alone; None where this
    onnxruntime has no such attribute (its wrapper's `run` then)."""
    if session.get_providers() != ["CPUExecutionProvider"]:
        return None
    compiled = getattr(session, "_sess", None)
    run = getattr(compiled, "run", None)
    return run if callable(run) else None


def _on_pool(loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor, fn: Callable[[Any], T], arg: Any) -> asyncio.Future[T]:
    """`loop.run_in_executor` without its future chaining: the pool thread hands the outcome straight back."""
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        if future.cancelled():  # cancelled before it started
            return
        try:
            result = fn(arg)
        except BaseException as exc:  # handed to the caller, as run_in_executor does
            loop.call_soon_threadsafe(deliver, future, False, exc)
        else:
            loop.call_soon_threadsafe(deliver, future, True, result)

    pool.submit(run)  # a closed loop raises in `run`: kept on the pool's future, nobody waits any more
    return future


def _not_utf8(inputs: Mapping[str, Tensor]) -> InferenceError | None:
    """ONNX Runtime's Python API carries STRING tensors as str (it turns bytes objects into their repr), so
    BYTES elements must be UTF-8 text; anything else is the client's error, named, not an INTERNAL one."""
    for name, array in inputs.items():
        if array.dtype != np.object_:
            continue
        for index, value in enumerate(array.reshape(-1)):
            if isinstance(value, bytes):
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return invalid(
                        f"input {quote_name(name)} element {index} is not UTF-8 text ({exc.reason} at byte "
                        f"{exc.start}): ONNX Runtime string tensors hold UTF-8 text"
                    )
    return None


def _numeric(ort_type: str) -> bool:
    """Whether an ORT input or output type ('tensor(float)', 'tensor(string)', 'seq(...)') is a numeric tensor."""
    return ort_type.startswith("tensor(") and ort_type != "tensor(string)"


def _to_ort(array: Tensor) -> Tensor:
    """BYTES (object arrays of bytes) become object arrays of str, which is what ORT takes for STRING."""
    if array.dtype != np.object_:
        return array
    out = np.empty(array.shape, dtype=np.object_)
    out.reshape(-1)[:] = [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    return out


def _from_ort(value: Any) -> Tensor:
    array = np.asarray(value)
    if array.dtype.kind in ("U", "S", "O"):
        out = np.empty(array.shape, dtype=np.object_)
        out.reshape(-1)[:] = [
            v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogateescape") for v in array.reshape(-1)
        ]
        return out
    return array


InventorySource = Callable[[], GpuInventory]


class OnnxRuntimeBackend:
    """One session per device the instance groups place instances on; `count` threads per session."""

    name = "onnxruntime"

    def __init__(self, inventory: InventorySource | None = None, cpus: int = 0) -> None:
        self._inventory = inventory or _detected_gpus()
        self._cpus = cpus  # the CPU limit to size thread pools for (0: none but the process's affinity)

    def prepare_config(self, config: mc.ModelConfig, version_path: Path) -> mc.ModelConfig:
        path = paths.model_file(config, version_path, model_filename(config))
        if not path.is_file():
            raise ConfigError(f"model '{config.name}' version {version_path.name}: model file '{path.name}' not found")
        return onnx_autocomplete.autocomplete(config, path)

    async def load(self, context: LoadContext) -> list[ModelInstance]:
        config = context.config
        path = paths.model_file(config, context.version_path, model_filename(config))
        placement = place_instances(config, self._inventory(), backend=self.name, needs_gpu=False)
        for note in placement.notes:
            log.warning("%s", note)
        batched = config.max_batch_size > 0
        instances: list[ModelInstance] = []
        for device in sorted({s.device_id for s in placement.slots}, key=lambda d: -1 if d is None else d):
            slots = placement.on(device)
            if device is None:
                providers: list[ProviderSpec] = ["CPUExecutionProvider"]
            else:
                available = ort.get_available_providers()
                providers, note = gpu_provider_list(
                    config, available, device, context.cache_dir, context.version,
                    unloadable=_unloadable_providers(config, available),
                )
                if note:
                    log.warning("%s", note)
            cpus = usable_cpus(len(os.sched_getaffinity(0)), self._cpus)
            session = await self._session(config, context.version, path, providers, len(slots), cpus)
            on_gpu = device is not None and session.get_providers()[0] != "CPUExecutionProvider"
            pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix=f"ort-{config.name}")
            instances.extend(
                OnnxInstance(session, pool, config.name, batched, device if on_gpu else None) for _ in slots
            )
        return instances

    @staticmethod
    async def _session(
        config: mc.ModelConfig, version: int, path: Path, providers: list[ProviderSpec], count: int, cpus: int
    ) -> ort.InferenceSession:
        threads = thread_options(config, count, cpus)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads.intra_op
        options.inter_op_num_threads = threads.inter_op
        if threads.parallel:
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        options.log_severity_level = 3
        loop = asyncio.get_running_loop()
        try:
            session = await loop.run_in_executor(
                None, lambda: ort.InferenceSession(str(path), sess_options=options, providers=providers)
            )
        except Exception as exc:
            raise ModelInitError(f"model '{config.name}' version {version}: onnxruntime cannot load {path.name}: {exc}") from None
        _check_io(config, session)
        return session


@functools.cache
def tensorrt_provider_error() -> str | None:
    """Why onnxruntime's TensorRT provider cannot load here (TensorRT's libnvinfer absent), or None when it can.

    onnxruntime-gpu lists TensorrtExecutionProvider whether or not TensorRT is installed (the GPU image without
    TensorRT); a session asked for it then prints an "EP Error" and retries on CUDA and CPU without the provider
    options, on GPU 0 whatever the placement chose. Loading the provider library as onnxruntime would tells first.
    """
    library = Path(ort.__file__).parent / "capi" / TRT_PROVIDER_LIBRARY
    if not library.is_file():
        return f"{library.name} is not part of this onnxruntime build"
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return str(exc)
    return None


def _unloadable_providers(config: mc.ModelConfig, available: Sequence[str]) -> dict[str, str]:
    """Providers the config would use that this onnxruntime lists but cannot load, with why (gpu_provider_list)."""
    if wants_tensorrt(config) and TRT_PROVIDER in available and (why := tensorrt_provider_error()) is not None:
        return {TRT_PROVIDER: why}
    return {}


def _detected_gpus() -> InventorySource:
    """GPUs as NVML and the environment show them, looked up once, on the first load that asks."""
    found: list[GpuInventory] = []

    def inventory() -> GpuInventory:
        if not found:
            detected, nvml = detect_gpus(os.environ)
            if nvml is not None:
                nvml.close()
            found.append(detected)
        return found[0]

    return inventory


def _check_io(config: mc.ModelConfig, session: ort.InferenceSession) -> None:
    graph_inputs = {i.name for i in session.get_inputs()}
    graph_outputs = {o.name for o in session.get_outputs()}
    for tensor in config.input:
        if tensor.name not in graph_inputs:
            raise ConfigError(
                f"model '{config.name}': config input '{tensor.name}' is not an input of the ONNX graph "
                f"(graph inputs: {', '.join(sorted(graph_inputs))})"
            )
    for tensor in config.output:
        if tensor.name not in graph_outputs:
            raise ConfigError(
                f"model '{config.name}': config output '{tensor.name}' is not an output of the ONNX graph "
                f"(graph outputs: {', '.join(sorted(graph_outputs))})"
            )
