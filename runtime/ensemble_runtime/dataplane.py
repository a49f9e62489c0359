"""The data plane every transport calls for inference, readiness, metadata and statistics.

The repository side (index, load/unload, storage status) is `repository_plane.RepositoryPlane`; the
transports call each for its own requests, as MLServer and KServe divide them."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime import __version__, classification
from ensemble_runtime.admitted import Admitted, Parameters
from ensemble_runtime.backends.handoff import Deferred
from ensemble_runtime.ensemble.executor import EnsembleRun
from ensemble_runtime.ensemble_tasks import infer_ensemble
from ensemble_runtime.errors import (
    ErrorCode,
    InferenceError,
    internal,
    not_found,
    quote_name,
    unavailable,
)
from ensemble_runtime.inference import (
    BackendRequest,
    BackendResult,
    InferRequest,
    InferResponse,
    Tensor,
)
from ensemble_runtime.model_manager import ModelManager
from ensemble_runtime.registry import EnsembleState, LoadedVersion, Registry, parse_version
from ensemble_runtime.response_cache import CachedResponse
from ensemble_runtime.response_caching import Caching, Lookup, identity
from ensemble_runtime.responses import StreamResponse
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.sequences import SequenceTag, live_version, names_sequence, take_sequence_parameters
from ensemble_runtime.shared_memory import SharedMemoryRegistry
from ensemble_runtime.shared_memory.cuda_ipc import CudaIpcOpener
from ensemble_runtime.stats import ComputeTimes
from ensemble_runtime.step_calls import StepCalls
from ensemble_runtime.stream_inference import DECOUPLED_REFUSAL, infer_stream
from ensemble_runtime.traces import Trace, TracedTimes, TraceSettings, parse_changes
from ensemble_runtime.tracing import Tracing
from ensemble_runtime.validation import ModelSignature, check_inputs, check_requested

SERVER_NAME = "ensemble-runtime"
GRPC_ENDPOINT = "ModelInfer RPC"  # how Triton names the endpoint that refuses decoupled models
HTTP_ENDPOINT = "HTTP end point"
BLS_ENDPOINT = "InferenceRequest.exec() without decoupled=True"
EXTENSIONS = (
    "classification", "model_configuration", "model_repository", "model_repository(unload_dependents)", "statistics",
    "binary_tensor_data", "system_shared_memory", "cuda_shared_memory", "logging",
    "trace",
)


# Where `infer_then` hands a request's response, or its error, on the thread that ran it.
Answer = Callable[[InferResponse | Exception], None]


@dataclass
class DataPlane:
    registry: Registry
    manager: ModelManager  # readiness: the models the configuration asks for (ModelManager.ready)
    strict_readiness: bool = True
    server_name: str = SERVER_NAME  # --server-name: what server metadata calls this server
    # id(config) -> (that config, its signature); holding the config keeps its id from being reused
    _signatures: dict[int, tuple[object, ModelSignature]] = field(default_factory=dict)
    accepting: bool = True
    started: bool = True  # the initial load (and sync) has finished; Server.start clears it until then
    in_flight: int = 0
    # the ends of requests `infer_then` handed to a model thread: queued before their answer, counted on the loop
    # as it takes the next request or reads what they change, within a few milliseconds at the latest
    settlements: Deferred = field(default_factory=Deferred)
    _step_tasks: set[asyncio.Task[dict[str, Tensor]]] = field(default_factory=set)  # ensemble steps run as tasks
    # Triton's shared memory extensions: regions clients registered (released on unregister and at exit)
    shared_memory: SharedMemoryRegistry = field(default_factory=lambda: SharedMemoryRegistry(CudaIpcOpener()))
    # Triton's trace extension: a request its settings sample takes `infer`'s path, which traces it
    tracing: Tracing = field(default_factory=Tracing)
    # Triton's response cache (--cache-config); the tasks of missed requests that `infer_then` took
    caching: Caching | None = None
    _missed: set[asyncio.Task[InferResponse]] = field(default_factory=set)

    # ---- health -------------------------------------------------------------------------------
    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        """Taking requests, the initial load done, and (strict readiness) every model the configuration asks
        for can answer: those of the repository in control modes none and poll, those loaded at startup or
        through the load API and not unloaded since in explicit mode (ModelManager.requested)."""
        if not self.accepting or not self.started:
            return False
        if not self.strict_readiness:
            return True
        return self.manager.ready()

    def model_ready(self, name: str, version: str = "") -> bool:
        parse_version(version)  # a version that is no number is INVALID_ARGUMENT, as in Triton, not "not ready"
        try:
            self.registry.find(name, version)
        except InferenceError:
            return False
        return True

    # ---- metadata -----------------------------------------------------------------------------
    def server_metadata(self) -> tuple[str, str, tuple[str, ...]]:
        return self.server_name, __version__, EXTENSIONS

    def model_version(self, name: str, version: str = "") -> LoadedVersion:
        return self.registry.find(name, version)

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        rec = self.registry.records.get(name)
        if rec is None or rec.config is None:
            raise not_found(f"Request for unknown model: {quote_name(name)} is not found")
        if not rec.served:  # not loaded (unloaded, or its load failed): Triton serves no config either
            raise not_found(f"Request for unknown model: {quote_name(name)} has no available versions")
        if version:
            return self.registry.find(name, version).config
        default = rec.default_version()
        return default.config if default is not None else rec.config

    def served_versions(self, name: str) -> dict[str, int]:
        """The version set an ensemble serves now: step model -> version ('model#step' where a model
        serves two steps at different versions)."""
        rec = self.registry.records.get(name)
        if rec is None or rec.ensemble is None:
            raise not_found(f"{quote_name(name)} is not a loaded ensemble")
        out: dict[str, int] = {}
        for index, lv in sorted(rec.ensemble.steps.items()):
            key = lv.model if out.get(lv.model, lv.version) == lv.version else f"{lv.model}#{index}"
            out[key] = lv.version
        return out

    def settle_answered(self) -> None:
        """On the loop: count every request answered so far (statistics, in flight, queue places) before reading
        them; what a model thread answered is counted as the loop admits the next request, here, or within a few
        milliseconds (`Deferred`)."""
        self.settlements.run()

    def requests_in_flight(self) -> int:
        """On the loop: requests taken and not yet answered."""
        self.settle_answered()
        return self.in_flight

    def statistics(self, name: str = "", version: str = "") -> list[LoadedVersion]:
        self.settle_answered()
        if name:
            rec = self.registry.records.get(name)
            if rec is None or not rec.served:
                raise not_found(f"requested model {quote_name(name)} is not available")
            if version:
                return [self.registry.find(name, version)]
            return [rec.versions[v] for v in rec.served]
        return [
            rec.versions[v]
            for _, rec in sorted(self.registry.records.items())
            for v in rec.served
            if v in rec.versions
        ]

    # ---- inference ----------------------------------------------------------------------------
    def signature(self, lv: LoadedVersion) -> ModelSignature:
        """What the version accepts and produces, computed once per config object."""
        cached = self._signatures.get(id(lv.config))
        if cached is not None and cached[0] is lv.config:
            return cached[1]
        sig = ModelSignature.from_config(lv.config)
        self._signatures[id(lv.config)] = (lv.config, sig)
        return sig

    async def infer(
        self, request: InferRequest, declared: Mapping[str, str] | None = None, endpoint: str = GRPC_ENDPOINT
    ) -> InferResponse:
        if not self.accepting:
            raise unavailable("server is shutting down and no longer accepts requests")
        tag = take_sequence_parameters(request.parameters)
        lv = self.sequence_version(request.model_name, request.model_version, tag) or self.registry.find(
            request.model_name, request.model_version
        )
        rec = self.registry.records[request.model_name]
        if lv.config.model_transaction_policy.decoupled or (rec.ensemble is not None and rec.ensemble.graph.decoupled):
            raise InferenceError(ErrorCode.UNIMPLEMENTED, DECOUPLED_REFUSAL.format(endpoint))
        admitted = self._admit(lv, request, declared, tag)  # a request refused here is no failure in the statistics
        lookup = self._look_up(admitted, rec.ensemble) if tag is None and self.caching is not None else None
        if lookup is not None and lookup.hit is not None:
            admitted.count_success(time.perf_counter_ns())
            hit: Parameters = {}
            if rec.ensemble is not None:
                hit["ensemble_versions"] = rec.ensemble.describe()
            return admitted.respond(dict(lookup.hit.outputs), hit)
        return await self._run(admitted, rec.ensemble, tag, lookup)

    async def _run(
        self, admitted: Admitted, ensemble: EnsembleState | None, tag: SequenceTag | None, lookup: Lookup | None
    ) -> InferResponse:
        """`infer` once the request is admitted (and missed the cache, where its version uses one)."""
        lv = admitted.lv
        parameters: Parameters = {}
        traced = (
            self.tracing.begin(admitted.model_name, lv.version, admitted.request_id, admitted.start_ns)
            if self.tracing.control.active else None
        )
        self.in_flight += 1
        outputs = None
        try:
            if ensemble is not None:
                compute = ComputeTimes()  # the ensemble request's compute: its steps' executions, summed
                queued = time.perf_counter_ns()
                if traced is not None:
                    traced[0].mark("QUEUE_START", queued)
                outputs, versions = await infer_ensemble(self, lv, ensemble.graph, admitted.request, compute, tag, traced)
                parameters["ensemble_versions"] = versions
                admitted.count_ensemble(queued, compute)
            else:
                outputs = await self._infer_model(lv, admitted.request, traced[0] if traced else None)
            if lookup is not None and self.caching is not None:
                self.caching.store(lv, lookup, outputs)
        except Exception as exc:
            self._count_failure(admitted, exc, time.perf_counter_ns())
            raise
        finally:
            self.in_flight -= 1
            if traced is not None:
                self.tracing.end(traced, admitted.model_name, answered=outputs is not None)
        admitted.count_success(time.perf_counter_ns())
        return admitted.respond(outputs, parameters)

    def infer_then(
        self, request: InferRequest, declared: Mapping[str, str] | None, answer: Answer, endpoint: str = GRPC_ENDPOINT
    ) -> bool:
        """`infer` without a task, where it can be: a request in no sequence, for a model (not decoupled) whose
        instances queue calls on their own threads, or run it inline on the loop (`Scheduler.takes_then`), or for
        an ensemble (`_ensemble_then`). Here, on the loop, the request is checked as `infer` checks it (raising the same
        errors); the thread that runs it calls `answer` with the response or the error, after queuing the
        request's end (statistics, in flight, its place in the queue) for the loop, which counts it as it admits
        the next request (before its checks), or reads what it changes (`settle_answered`), or within
        `Deferred`'s few milliseconds otherwise: no wake-up of the loop per request under traffic (only a request
        alone in flight wakes it, `_settle_alone`), and whatever reads the statistics after the answer left sees
        it counted. False: nothing was done (call `infer`); so for a
        request the trace settings sample, which `infer` traces."""
        if not self.accepting or (request.parameters and names_sequence(request.parameters)):
            return False
        traces = self.tracing.control
        if not traces.active:
            return self._take_then(request, declared, answer)
        if traces.due(request.model_name):
            return False
        taken = self._take_then(request, declared, answer)
        if taken:
            traces.pass_over(request.model_name)
        return taken

    def _take_then(self, request: InferRequest, declared: Mapping[str, str] | None, answer: Answer) -> bool:
        lv = self.registry.find(request.model_name, request.model_version)
        ensemble = self.registry.records[request.model_name].ensemble
        if ensemble is not None:
            return self._ensemble_then(lv, ensemble, request, declared, answer)
        scheduler = lv.scheduler
        if (
            lv.config.model_transaction_policy.decoupled
            or not isinstance(scheduler, Scheduler)
            or not scheduler.takes_then()
        ):
            return False
        admitted = self._admit(lv, request, declared, None)
        # a hit is answered here, on the loop; a miss stored as it settles
        cached = self._look_up(admitted, None) if self.caching is not None else None
        if cached is not None and cached.hit is not None:
            answer(self._answered_from(admitted, cached.hit, {}))
            return True
        if cached is None and not scheduler.hands_on and self._ran_inline(admitted, scheduler, answer):
            return True
        loop_thread = threading.get_ident()
        loop = asyncio.get_running_loop()
        inline = False

        def then(result: BackendResult, settle: Callable[[], None]) -> None:  # on the thread that ran it
            nonlocal inline
            end = time.perf_counter_ns()
            outcome = admitted.outcome(result, {})
            if threading.get_ident() == loop_thread:  # ran inline
                inline = True
                self._settle(admitted, result, end, settle, cached)
                answer(outcome)
                return
            # counted (and stored in the cache) before the answer leaves
            self.settlements.add(self._settle, admitted, result, end, settle, cached)
            answer(outcome)
            self._settle_alone(self.settlements)

        self.in_flight += 1
        Registry.acquire(lv)
        try:
            scheduler.submit_then(admitted.request, then)
        except Exception as exc:
            self._settle(admitted, exc, time.perf_counter_ns(), None)
            raise
        if not inline:  # a model thread has it (or had: it is counted all the same)
            self.settlements.expect(loop)
        return True

    def _settle_alone(self, settlements: Deferred) -> None:
        """On a model's thread, once it answered a request whose end it queued in `settlements`: where that request
        is the only one in flight, the loop has nothing else to do, so it is woken to count it now, while the client
        reads the answer; otherwise the next request, at one in flight, would carry the count on its own time
        (measured: a fifth of the p50 of a python model and of a 2-step chain at one in flight; bench/README.md).
        With others in flight the loop counts it as it takes the next, with no wake-up. (`in_flight` is the loop's:
        read here, it can be one request stale, which costs at most one wake-up more or less.)"""
        if self.in_flight == 1:
            settlements.run_soon()

    def _ran_inline(self, admitted: Admitted, scheduler: Scheduler, answer: Answer) -> bool:
        """`_take_then` for a request that a free instance runs inline now (`Scheduler.run_inline`), no response
        cache: run here, counted and answered before this returns, without the callback and the settlement a
        request handed on needs. Nothing else runs on the loop meanwhile, so it is never seen in flight (nor its
        version taken: no drain can wait on it). False: no instance runs it so now (nothing was done)."""
        try:
            result = scheduler.run_inline(admitted.request)
        except Exception as exc:  # refused, as `submit_then` refuses: a failure in the statistics
            self._count_failure(admitted, exc, time.perf_counter_ns())
            raise
        if result is None:
            return False
        end = time.perf_counter_ns()
        if isinstance(result, BaseException):
            self._count_failure(admitted, result, end)
        else:
            admitted.count_success(end)
        answer(admitted.outcome(result, {}))
        return True

    def _ensemble_then(
        self, lv: LoadedVersion, ensemble: EnsembleState, request: InferRequest,
        declared: Mapping[str, str] | None, answer: Answer,
    ) -> bool:
        """`infer_then` for an ensemble (not decoupled, every step on a scheduler): its steps run through
        `EnsembleRun` on one version set, each handed to its model as `StepCalls` can; the answer goes out on the
        loop once the last step ended, after the request is counted."""
        graph = ensemble.graph
        if graph.decoupled:
            return False
        steps = dict(ensemble.steps)  # one version set for the whole request
        if not steps or not StepCalls.can_run(steps):
            return False
        if self.caching is not None and any(map(self.caching.enabled, steps.values())):
            return self._ensemble_cached_then(lv, ensemble, request, declared, answer)
        described = ensemble.describe()
        admitted = self._admit(lv, request, declared, None)
        # a hit is answered here, on the loop; a miss stored as it settles
        cached = self._look_up(admitted, ensemble) if self.caching is not None else None
        if cached is not None and cached.hit is not None:
            answer(self._answered_from(admitted, cached.hit, {"ensemble_versions": described}))
            return True
        loop = asyncio.get_running_loop()
        calls = StepCalls(steps, ComputeTimes(), loop, self._step_tasks)
        queued = time.perf_counter_ns()

        def ended(result: dict[str, Tensor] | Exception, end: int) -> None:  # on the loop
            if not isinstance(result, Exception):
                admitted.count_ensemble(queued, calls.compute)
            self._settle(admitted, result, end, functools.partial(_release, steps.values()), cached)

        def finish(result: dict[str, Tensor] | Exception) -> None:  # on the loop (carried: maybe a model's thread)
            outcome = admitted.outcome(result, {"ensemble_versions": described})
            carry = calls.carry
            if carry is None:
                ended(result, time.perf_counter_ns())
                answer(outcome)
                return
            carry.add(ended, result, time.perf_counter_ns())  # after its steps' ends, counted before the answer leaves
            if threading.get_ident() == calls.loop_thread:
                carry.run()
                answer(outcome)
                return
            answer(outcome)
            self._settle_alone(carry)

        run = EnsembleRun(
            graph, admitted.request.inputs, admitted.request.requested_outputs, calls.submit, finish,
            request_id=admitted.request.request_id,
        )
        if run.serial:  # a chain: model threads carry it from step to step, and answer
            calls.carry = self.settlements
            self.settlements.expect(loop)
        self.in_flight += 1
        for version in (*steps.values(), lv):
            Registry.acquire(version)
        run.start()
        return True

    def _ensemble_cached_then(
        self, lv: LoadedVersion, ensemble: EnsembleState, request: InferRequest,
        declared: Mapping[str, str] | None, answer: Answer,
    ) -> bool:
        """An ensemble whose steps ask the cache (on the task path, `_infer_ensemble`): where it caches too, its
        hits are answered here, on the loop, and only a miss takes a task."""
        if self.caching is None or not self.caching.enabled(lv):
            return False
        admitted = self._admit(lv, request, declared, None)
        cached = self._look_up(admitted, ensemble)
        assert cached is not None
        if cached.hit is not None:
            answer(self._answered_from(admitted, cached.hit, {"ensemble_versions": ensemble.describe()}))
            return True
        task = asyncio.get_running_loop().create_task(self._run(admitted, ensemble, None, cached))
        self._missed.add(task)
        task.add_done_callback(functools.partial(self._missed_ended, answer))
        return True

    def _missed_ended(self, answer: Answer, task: asyncio.Task[InferResponse]) -> None:
        self._missed.discard(task)
        if task.cancelled():
            answer(unavailable("the server is stopping"))
            return
        exc = task.exception()
        answer(task.result() if exc is None else exc if isinstance(exc, Exception) else internal(repr(exc)))

    def _settle(
        self, admitted: Admitted, result: BackendResult, end: int, settle: Callable[[], None] | None,
        cached: Lookup | None = None,
    ) -> None:
        """On the loop: the end of a request `infer_then` took (what leaving `infer` does); `settle` first (the
        scheduler's part, or an ensemble's step versions); a response the cache missed is stored."""
        if settle is not None:
            settle()
        self.in_flight -= 1
        Registry.release(admitted.lv)
        if isinstance(result, BaseException):
            self._count_failure(admitted, result, end)
            return
        if cached is not None and self.caching is not None:
            self.caching.store(admitted.lv, cached, result)
        admitted.count_success(end)

    def _answered_from(
        self, admitted: Admitted, hit: CachedResponse, parameters: Parameters
    ) -> InferResponse | Exception:
        """A request `infer_then` took, answered from the cache: counted a success (the hit itself is counted by
        the lookup), its response built from the stored outputs."""
        admitted.count_success(time.perf_counter_ns())
        return admitted.outcome(dict(hit.outputs), parameters)

    def _look_up(self, admitted: Admitted, ensemble: EnsembleState | None) -> Lookup | None:
        """The request looked up in the response cache; None where its version does not use one."""
        lv = admitted.lv
        if self.caching is None or not self.caching.enabled(lv):
            return None
        steps = [s for _, s in sorted(ensemble.steps.items())] if ensemble is not None else []
        return self.caching.lookup(lv, identity(lv, steps), admitted.request, admitted.classes, admitted.start_ns)

    def _admit(
        self, lv: LoadedVersion, request: InferRequest, declared: Mapping[str, str] | None, tag: SequenceTag | None
    ) -> Admitted:
        """The request checked against what `lv` accepts, as the backend request for it. What model threads
        answered is counted first: the places they held in a queue are free for this one."""
        self.settlements.run()
        start = time.perf_counter_ns()
        sig = self.signature(lv)
        inputs = check_inputs(sig, request.inputs, declared or {})
        asked = request.requested_outputs
        requested = check_requested(sig, asked) if asked else tuple(sig.outputs)
        classes = classification.class_counts(request.output_parameters) if request.output_parameters else {}
        backend_request = BackendRequest(
            inputs, requested, request.parameters, request.id, tag.correlation_id if tag else 0, tag.flags if tag else 0
        )
        return Admitted(lv, backend_request, classes, request.model_name, request.id, start)

    def _count_failure(self, admitted: Admitted, exc: BaseException, end: int) -> None:
        admitted.count_failure(exc, end, ensemble=self.registry.records[admitted.lv.model].ensemble is not None)

    def sequence_version(self, name: str, version: str, tag: SequenceTag | None) -> LoadedVersion | None:
        """A request that continues a sequence runs on the version its sequence started on, even one no longer
        served (draining while the sequence lives). None: no such sequence (or a start, or a pinned version)."""
        if tag is None or tag.start or version:
            return None
        rec = self.registry.records.get(name)
        return live_version(list(rec.versions.values()), tag.correlation_id) if rec is not None else None

    def infer_stream(
        self, request: InferRequest, declared: Mapping[str, str] | None = None
    ) -> AsyncGenerator[StreamResponse, None]:
        """Every response of `request` (ModelStreamInfer, BLS exec(decoupled=True)): one for a model that
        is not decoupled, zero or many and then the final flag for a decoupled model or ensemble."""
        return infer_stream(self, request, declared)

    async def _infer_model(self, lv: LoadedVersion, request: BackendRequest, trace: Trace | None) -> dict[str, Tensor]:
        if lv.scheduler is None:
            raise unavailable(f"model '{lv.model}' version {lv.version} is not loaded")
        with Registry.holding(lv):
            if trace is None:
                return await lv.scheduler.submit(request)
            trace.mark("QUEUE_START", time.perf_counter_ns())
            return await lv.scheduler.submit(request, TracedTimes(trace=trace))

    # ---- traces ---------------------------------------------------------------------------------
    def trace_settings(self, model: str = "", changes: Mapping[str, object] | None = None) -> TraceSettings:
        """The trace settings (a model's: the global ones with its own fields), after `changes` (Triton's names
        and JSON values: `traces.parse_changes`), all applied or none."""
        if model:
            self.model_version(model)  # an unknown model has no settings
        if changes:
            self.tracing.control.update(parse_changes(changes), model)
        return self.tracing.control.settings(model)


def _release(versions: Iterable[LoadedVersion]) -> None:
    for lv in versions:
        Registry.release(lv)
