"""Triton's sequence batcher: every request of a sequence runs on the instance and slot its sequence holds.

Each instance has `slots_per_instance` sequence slots. A sequence takes a free slot at its START request (or
waits in the backlog, oldest first, until one frees) and keeps it until its END request has run or it has been
idle for `max_sequence_idle_microseconds`; the idle ones are released by one timer task per scheduler. One worker
per instance forms batches of at most one request per sequence (`direct`: the slots' waiting requests in arrival
order; `oldest`: the oldest sequences first), waits up to the strategy's `max_queue_delay_microseconds` for more,
adds the control tensors and the sequence's implicit state, runs them, and keeps the state the model returns.

`hold` / `release` are called when a sequence starts and when it is over: the registry counts live sequences as
in flight, so a version being replaced stays loaded until its sequences have ended (version consistency).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ensemble_runtime.backends.base import ModelInstance
from ensemble_runtime.errors import ResponseError, internal, invalid, must_propagate, unavailable
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor, batch_size_of
from ensemble_runtime.sequences.controls import FLAG_END, FLAG_START, CorrelationId, SequenceSettings, describe_id
from ensemble_runtime.stats import ComputeTimes, ModelStats

REAPED_MEMORY = 1024  # correlation IDs of recently timed-out sequences kept to explain a late request
MAX_BACKLOG = 4096  # sequences waiting for a free slot; a start beyond it is refused (bounded memory)


@dataclass(eq=False, slots=True)
class _Item:
    request: BackendRequest
    future: asyncio.Future[dict[str, Tensor]]
    enqueued_ns: int
    times: ComputeTimes | None = None  # where the caller sums compute phases (an ensemble request's steps)


@dataclass(eq=False, slots=True)
class _Sequence:
    correlation_id: CorrelationId
    order: int
    pending: deque[_Item] = field(default_factory=deque)
    state: dict[str, Tensor] = field(default_factory=dict)
    instance: int = -1  # -1: in the backlog
    last_active: float = 0.0
    ended: bool = False  # its END request is queued: no more requests join it
    busy: bool = False
    released: bool = False


@dataclass
class SequenceScheduler:
    model: str
    instances: list[ModelInstance]
    settings: SequenceSettings
    stats: ModelStats
    hold: Callable[[], None] = lambda: None
    release: Callable[[], None] = lambda: None
    _live: dict[CorrelationId, _Sequence] = field(default_factory=dict)
    _assigned: list[list[_Sequence]] = field(default_factory=list)
    _backlog: deque[_Sequence] = field(default_factory=deque)
    _wake: list[asyncio.Event] = field(default_factory=list)
    _reaper_wake: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _reaped: OrderedDict[CorrelationId, None] = field(default_factory=OrderedDict)
    _order: itertools.count[int] = field(default_factory=itertools.count)
    _closing: bool = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for index, instance in enumerate(self.instances):
            self._assigned.append([])
            self._wake.append(asyncio.Event())
            self._tasks.append(loop.create_task(self._work(index, instance), name=f"{self.model}-sequence-{index}"))
        self._tasks.append(loop.create_task(self._reap(), name=f"{self.model}-sequence-reaper"))

    # ---- queries ------------------------------------------------------------------------------------------
    def pending(self) -> int:
        """Requests queued in their sequences, not yet running (Triton's `nv_inference_pending_request_count`)."""
        return sum(len(seq.pending) for seq in self._live.values())

    def holds(self, correlation_id: CorrelationId) -> bool:
        """Whether a live sequence with this ID runs here (its later requests must come here)."""
        return correlation_id in self._live

    @property
    def live_sequences(self) -> int:
        return len(self._live)

    # ---- requests -----------------------------------------------------------------------------------------
    async def submit(self, request: BackendRequest, times: ComputeTimes | None = None) -> dict[str, Tensor]:
        """Run `request` in its sequence; on success its execution's compute phases are added to `times`."""
        item = self._enqueue(request, times)  # synchronous: requests of a sequence keep the order they arrived in
        return await item.future

    def _enqueue(self, request: BackendRequest, times: ComputeTimes | None = None) -> _Item:
        cid = request.correlation_id
        if cid in (0, ""):
            raise invalid(f"inference request to model '{self.model}' must specify a non-zero or non-empty correlation ID")
        if self.settings.batching and batch_size_of(request.inputs) > 1:
            raise invalid(
                f"inference request to model '{self.model}' must specify batch-size 1 due to requirements of "
                "sequence batcher"
            )
        start, end = bool(request.flags & FLAG_START), bool(request.flags & FLAG_END)
        seq = self._live.get(cid)
        if seq is None and not start:
            why = ""
            if cid in self._reaped:
                why = (
                    f" (sequence {describe_id(cid)} was released after being idle for more than "
                    f"{self.settings.idle_s * 1e6:.0f} microseconds, max_sequence_idle_microseconds)"
                )
            raise invalid(
                f"inference request for sequence {describe_id(cid)} to model '{self.model}' must specify the START "
                f"flag on the first request of the sequence{why}"
            )
        if self._closing:
            raise unavailable(f"model '{self.model}' is unloading and no longer accepts sequence requests")
        # the control tensors are built now so a bad correlation ID fails this request only
        controls = self.settings.control_tensors(cid, request.flags)
        if seq is None:
            if len(self._backlog) >= MAX_BACKLOG and self._free_instance() is None:
                raise unavailable(
                    f"model '{self.model}': every sequence slot is taken and {MAX_BACKLOG} sequences already wait "
                    "for one; retry later"
                )
            seq = self._begin(cid)
        self._reaped.pop(cid, None)
        item = _Item(
            dataclasses.replace(request, inputs={**request.inputs, **controls}),
            asyncio.get_running_loop().create_future(),
            time.perf_counter_ns(),
            times,
        )
        seq.pending.append(item)
        seq.last_active = time.monotonic()
        if end:
            seq.ended = True
            del self._live[cid]  # a later START with this ID begins a new sequence
        if seq.instance >= 0:
            self._wake[seq.instance].set()
        return item

    def _begin(self, cid: CorrelationId) -> _Sequence:
        seq = _Sequence(cid, next(self._order))
        self._live[cid] = seq
        self.hold()
        free = self._free_instance()
        if free is None:
            self._backlog.append(seq)
        else:
            self._assign(seq, free)
        self._reaper_wake.set()
        return seq

    def _free_instance(self) -> int | None:
        """The instance with the most free slots (None when every slot is taken)."""
        best, room = None, 0
        for index, assigned in enumerate(self._assigned):
            free = self.settings.slots_per_instance - len(assigned)
            if free > room:
                best, room = index, free
        return best

    def _assign(self, seq: _Sequence, index: int) -> None:
        seq.instance = index
        self._assigned[index].append(seq)
        self._wake[index].set()

    def _finish(self, seq: _Sequence) -> None:
        """The sequence is over (ended and drained, or idle too long): free its slot for the backlog."""
        if seq.released:
            return
        seq.released = True
        seq.state.clear()
        if self._live.get(seq.correlation_id) is seq:
            del self._live[seq.correlation_id]
        if seq.instance >= 0:
            self._assigned[seq.instance].remove(seq)
            if self._backlog:
                self._assign(self._backlog.popleft(), seq.instance)
        elif seq in self._backlog:
            self._backlog.remove(seq)
        self.release()

    # ---- execution ----------------------------------------------------------------------------------------
    def _ready(self, index: int) -> list[_Sequence]:
        ready = [s for s in self._assigned[index] if s.pending and not s.busy]
        if self.settings.oldest:
            ready.sort(key=lambda s: s.order)
        else:
            ready.sort(key=lambda s: s.pending[0].enqueued_ns)
        return ready[: self.settings.batch_limit]

    async def _work(self, index: int, instance: ModelInstance) -> None:
        wake = self._wake[index]
        while True:
            batch = self._ready(index)
            if not batch:
                if self._closing:
                    return
                wake.clear()
                await wake.wait()
                continue
            delay = self.settings.max_queue_delay_s
            if delay > 0 and len(batch) < self.settings.batch_limit and not self._closing:
                deadline = time.monotonic() + delay
                while len(batch) < self.settings.batch_limit and (left := deadline - time.monotonic()) > 0:
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), left)
                    batch = self._ready(index)
            await self._run(instance, batch)

    async def _run(self, instance: ModelInstance, batch: list[_Sequence]) -> None:
        items = [seq.pending.popleft() for seq in batch]
        for seq in batch:
            seq.busy = True
        started = time.perf_counter_ns()
        requests = [self._with_state(seq, item) for seq, item in zip(batch, items, strict=True)]
        input_end = time.perf_counter_ns()
        try:
            results: list[BackendResult] = await instance.execute(requests)
        except Exception as exc:  # a backend bug fails these requests, not the worker
            results = [exc] * len(items)
        except BaseException as exc:  # never let model code end the event loop
            if must_propagate(exc):
                raise
            results = [internal(f"model '{self.model}': execution raised {exc!r}")] * len(items)
        output_start = time.perf_counter_ns()
        if len(results) != len(items):
            results = [internal(f"model '{self.model}' returned {len(results)} responses for {len(items)} requests")] * len(items)
        now = time.monotonic()
        for seq, item, result in zip(batch, items, results, strict=True):
            seq.busy = False
            seq.last_active = now
            if isinstance(result, BaseException):
                if not item.future.done():
                    item.future.set_exception(result)
            else:
                for name in self.settings.state_outputs:
                    if name in result:
                        seq.state[name] = result[name]
                if not item.future.done():
                    item.future.set_result({k: v for k, v in result.items() if k in item.request.requested_outputs})
            if seq.ended and not seq.pending:
                self._finish(seq)
        self._record(items, results, started, ComputeTimes(
            input_end - started, output_start - input_end, time.perf_counter_ns() - output_start
        ))

    def _record(self, items: list[_Item], results: list[BackendResult], started: int, compute: ComputeTimes) -> None:
        """Triton's statistics, as the dynamic batcher keeps them: per successful request (a model's own error
        response counts: it ran), and once per execution with a success."""
        succeeded = [item for item, result in zip(items, results, strict=True)
                     if not isinstance(result, BaseException) or isinstance(result, ResponseError)]
        for item in succeeded:
            self.stats.record_request(1, started - item.enqueued_ns, compute)  # a sequence request is one inference
            if item.times is not None:
                item.times.add(compute)
        if succeeded:
            self.stats.record_execution(len(items), compute, time.time_ns() // 1_000_000)

    def _with_state(self, seq: _Sequence, item: _Item) -> BackendRequest:
        request = item.request
        if not self.settings.states:
            return request
        inputs = dict(request.inputs)
        starting = bool(request.flags & FLAG_START)
        for spec in self.settings.states:
            kept = None if starting else seq.state.get(spec.output_name)
            inputs[spec.input_name] = spec.initial if kept is None else kept
        wanted = request.requested_outputs + tuple(n for n in self.settings.state_outputs if n not in request.requested_outputs)
        return dataclasses.replace(request, inputs=inputs, requested_outputs=wanted)

    # ---- idle sequences -----------------------------------------------------------------------------------
    async def _reap(self) -> None:
        idle = self.settings.idle_s
        while not self._closing:
            now = time.monotonic()
            expired = [s for s in list(self._live.values()) if not s.pending and not s.busy and now - s.last_active >= idle]
            for seq in expired:
                self._reaped[seq.correlation_id] = None
                while len(self._reaped) > REAPED_MEMORY:
                    self._reaped.popitem(last=False)
                self._finish(seq)
            # a sequence with a request queued or running is looked at again a full idle period later
            waiting = [
                idle if s.pending or s.busy else s.last_active + idle - now for s in self._live.values()
            ]
            self._reaper_wake.clear()
            timeout = max(min(waiting), 0.001) if waiting else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reaper_wake.wait(), timeout)

    # ---- shutdown -----------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Refuse new requests, fail what waits in the backlog, let the slots' queued requests run, stop."""
        self._closing = True
        for seq in list(self._backlog):
            for item in seq.pending:
                if not item.future.done():
                    item.future.set_exception(unavailable(f"model '{self.model}' is unloading"))
            seq.pending.clear()
            self._finish(seq)
        for seq in list(self._live.values()):
            seq.ended = True
            if not seq.pending and not seq.busy:
                self._finish(seq)
        for wake in self._wake:
            wake.set()
        self._reaper_wake.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for assigned in self._assigned:
            for seq in list(assigned):
                self._finish(seq)
        for instance in self.instances:
            with contextlib.suppress(Exception):
                await instance.close()
