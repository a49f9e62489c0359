"""The contract between the scheduler and a backend, and what a backend gets to load a model version."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.custom_metrics import CustomMetrics
from ensemble_runtime.inference import BackendRequest, BackendResult, InferRequest, InferResponse
from ensemble_runtime.responses import StreamResponse


class ModelInitError(ConfigError):
    """A backend could not initialize a model whose config is fine: a Python model's constructor or
    `initialize()` raised, ONNX Runtime could not create the session, TensorRT no execution context.

    A ConfigError for its callers, on purpose: the version is UNAVAILABLE with this message, exactly as
    for a config refused at load (Triton reports both the same way). Catch this type to tell them apart.
    """


# How a model calls another model in the same server (Triton's BLS); injected, never imported.
ModelCaller = Callable[[InferRequest], Awaitable[InferResponse]]
# The same for every response of a decoupled model (BLS `exec(decoupled=True)`).
ModelStreamCaller = Callable[[InferRequest], AsyncIterator[StreamResponse]]


class ModelInstance(Protocol):
    """One execution slot of a loaded model version (Triton: a model instance)."""

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """Run a batch of requests; one result (outputs or the exception) per request, in order."""
        ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class RunTimes:
    """When an execution was queued on the instance (its inputs ready) and when it really ran
    (`time.perf_counter_ns`), stamped by the instance; 0: not yet (it failed before, or its caller left)."""

    queued_ns: int = 0
    started_ns: int = 0
    ended_ns: int = 0


@runtime_checkable
class QueuingInstance(ModelInstance, Protocol):
    """An instance that can queue executions itself (a python model's own thread): `execute_queued` may be
    called while earlier calls still run. The version's instances share that queue: a call through any of them
    runs on the first free one, in the order of the calls (one instance: one at a time)."""

    def queues_calls(self) -> bool:
        """Whether `execute_queued` queues (it may depend on the model: not for one that runs on the loop)."""
        ...

    async def execute_queued(self, requests: Sequence[BackendRequest], ran: RunTimes) -> list[BackendResult]:
        """`execute` on the first free instance of the version, after the calls before it; `ran` gets when it
        ran there."""
        ...

    def execute_then(self, request: BackendRequest, ran: RunTimes, then: Callable[[BackendResult], None]) -> None:
        """`execute_queued` for one request, without the event loop: the instance that runs it calls `then` with
        the result, on its own thread (`then` must not raise)."""
        ...


@runtime_checkable
class InlineInstance(ModelInstance, Protocol):
    """An instance whose executions may run on the caller's thread (an ONNX model that runs in microseconds, a
    python model that opted in with `EXECUTE_INLINE`: cheaper on the loop than handed to a thread and back)."""

    def runs_inline(self) -> bool:
        """Whether an execution would run on the caller's thread now (it may change as executions are timed)."""
        ...

    def execute_inline(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """`execute`, on the caller's thread."""
        ...

    def execute_one(self, request: BackendRequest) -> BackendResult:
        """`execute_inline([request])[0]`: one request's result, on the caller's thread, without a list each way
        (the scheduler's per-request path on the loop, `Scheduler.run_inline`)."""
        ...


@dataclass(frozen=True, slots=True)
class LoadContext:
    config: mc.ModelConfig  # after defaults and autocomplete
    version: int
    version_path: Path  # <repo>/<model>/<version>
    model_path: Path  # <repo>/<model>
    caller: ModelCaller
    cache_dir: Path | None = None
    stream_caller: ModelStreamCaller | None = None
    custom_metrics: CustomMetrics | None = None  # where a Python model's `pb_utils.MetricFamily`s go


class Backend(Protocol):
    name: str

    def prepare_config(self, config: mc.ModelConfig, version_path: Path) -> mc.ModelConfig:
        """Complete the config from the model file where the backend can (e.g. ONNX inputs/outputs)."""
        ...

    async def load(self, context: LoadContext) -> list[ModelInstance]:
        """Create the instances the config's instance groups ask for; raise with a reason on failure."""
        ...


@dataclass(frozen=True, slots=True)
class InstanceSlot:
    """One instance as the config alone names and places it (device-aware placement: gpu/placement.py)."""

    kind: str  # "CPU", "GPU", "AUTO" or "MODEL"
    name: str
    device_id: int


def instance_slots(config: mc.ModelConfig) -> list[InstanceSlot]:
    """One slot per instance the instance groups ask for, named as Triton does: `count` per listed GPU for GPU
    groups, `count` for any other group."""
    slots: list[InstanceSlot] = []
    for group in config.instance_group:
        kind = mc.ModelInstanceGroup.Kind.Name(group.kind).removeprefix("KIND_")
        devices = list(group.gpus) if group.kind == mc.ModelInstanceGroup.KIND_GPU and group.gpus else [0]
        index = 0
        for device in devices:
            for _ in range(max(1, group.count)):
                slots.append(InstanceSlot(kind, f"{group.name}_{index}", device))
                index += 1
    return slots or [InstanceSlot("CPU", f"{config.name}_0_0", 0)]
