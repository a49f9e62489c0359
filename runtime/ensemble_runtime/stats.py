"""Per model-version statistics in Triton's shape (counts and cumulative nanoseconds), with Triton's semantics.

Triton (core `infer_stats.cc`) counts two things:
- per request that succeeds: its inferences (`inference_count`, the request's batch size, at least 1), its
  duration (`success`), its wait before an instance took it (`queue`) and the compute phases of the execution
  that ran it (`compute_input`, `compute_infer`, `compute_output`): those five counts are always equal;
- per execution with at least one success: `execution_count` and `batch_stats[total batch size]`, each phase
  counted once for the batch.
A failed request counts only in `fail`. An ensemble request is counted the same way, its compute phases being
the sums over the step executions that served it (Triton's ensemble scheduler); the composing models keep their
own statistics as for any request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")  # Triton's nv_inference_request_failure reasons


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class ComputeTimes:
    """Nanoseconds one execution spent in each compute phase (for an ensemble request: summed over its steps)."""

    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0

    def add(self, other: ComputeTimes) -> None:
        self.input_ns += other.input_ns
        self.infer_ns += other.infer_ns
        self.output_ns += other.output_ns

    def ran(self, start: int, input_end: int, output_start: int, end: int) -> None:
        """When the execution these phases came from ran (`perf_counter_ns`): for a traced request's times
        (`traces.TracedTimes`); nothing here."""


@dataclass(slots=True)
class BatchStat:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStats:
    """What ModelStatistics and the metrics report for one loaded model version."""

    last_inference_ms: int = 0
    inference_count: int = 0  # inferences of successful requests, counting each batch element
    execution_count: int = 0  # executions with a success (a batch counts once)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)  # answered from the response cache: the lookups
    cache_miss: Duration = field(default_factory=Duration)  # not there: the lookups and the inserts
    batches: dict[int, BatchStat] = field(default_factory=dict)
    fail_reasons: dict[str, int] = field(default_factory=dict)  # `fail`'s count by Triton's failure reason

    def record_failure(self, ns: int, reason: str) -> None:
        """A failed request (`reason`: errors.failure_reason's)."""
        self.fail.add(ns)
        self.fail_reasons[reason] = self.fail_reasons.get(reason, 0) + 1

    def record_request(self, batch_size: int, queue_ns: int, compute: ComputeTimes) -> None:
        """A request that succeeded: its inferences, its time in the queue and its execution's compute phases."""
        self.inference_count += max(1, batch_size)
        self.queue.add(queue_ns)
        _add_compute(self.compute_input, self.compute_infer, self.compute_output, compute)

    def record_execution(self, batch_size: int, compute: ComputeTimes, now_ms: int) -> None:
        """An execution of `batch_size` inferences with at least one successful request."""
        self.execution_count += 1
        self.last_inference_ms = max(self.last_inference_ms, now_ms)
        stat = self.batches.get(batch_size)
        if stat is None:
            stat = self.batches[batch_size] = BatchStat()
        _add_compute(stat.compute_input, stat.compute_infer, stat.compute_output, compute)

    def record_alone(self, batch_size: int, queue_ns: int, compute: ComputeTimes, now_ms: int) -> None:
        """A request that succeeded in an execution of its own: `record_request` and `record_execution` in one
        call (the per-request path; the same counts)."""
        batch = max(1, batch_size)
        self.inference_count += batch
        self.execution_count += 1
        if now_ms > self.last_inference_ms:
            self.last_inference_ms = now_ms
        queue = self.queue
        queue.count += 1
        queue.ns += queue_ns
        _add_compute(self.compute_input, self.compute_infer, self.compute_output, compute)
        stat = self.batches.get(batch)
        if stat is None:
            stat = self.batches[batch] = BatchStat()
        _add_compute(stat.compute_input, stat.compute_infer, stat.compute_output, compute)


def _add_compute(into_input: Duration, into_infer: Duration, into_output: Duration, compute: ComputeTimes) -> None:
    """One count of each compute phase, with its nanoseconds (three `Duration.add` in one call)."""
    into_input.count += 1
    into_input.ns += compute.input_ns
    into_infer.count += 1
    into_infer.ns += compute.infer_ns
    into_output.count += 1
    into_output.ns += compute.output_ns
