"""Per model-version statistics in Triton's shape (counts and cumulative nanoseconds)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStat:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStats:
    """What ModelStatistics and the metrics report for one loaded model version."""

    last_inference_ms: int = 0
    inference_count: int = 0  # inferences, counting each batch element
    execution_count: int = 0  # backend executions (a batch counts once)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStat] = field(default_factory=dict)

    def record_execution(self, batch_size: int, requests: int, infer_ns: int) -> None:
        self.execution_count += 1
        self.inference_count += batch_size
        self.compute_infer.add(infer_ns, requests)
        stat = self.batches.get(batch_size)
        if stat is None:
            stat = self.batches[batch_size] = BatchStat()
        stat.compute_infer.add(infer_ns)
