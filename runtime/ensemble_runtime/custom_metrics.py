"""Metrics a model's own code defines (Triton python_backend's `pb_utils.MetricFamily`), one store per server.

Rules as Triton's core keeps them: a family is a name, a description, and a kind (counter, gauge or histogram);
creating one with a name already in use gives the same family (the first description stays), with another kind
it is refused. Within a family a metric is a set of labels: the same labels give the same value. A counter only
grows (`increment` by a non-negative amount), a gauge is incremented or `set`, a histogram `observe`s values into
the bucket bounds its metric was made with. Families and metrics are counted by the leases that hold them and
leave /metrics when the last lease is released (the model drops its `MetricFamily`, or its version unloads).

Model threads update values while /metrics reads them: every operation holds one lock, for a few dictionary
operations. Names that the server's own metrics use are refused, so a model cannot change or hide them.
"""

from __future__ import annotations

import collections
import enum
import itertools
import math
import re
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

Labels = tuple[tuple[str, str], ...]  # sorted by label name


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class CustomMetricError(ValueError):
    """A metric operation refused: the reason in Triton's words where it has them. (An argument of the wrong
    type is a TypeError, as Triton's bindings raise it.)"""


@dataclass
class _Value:
    refs: int
    value: float = 0.0
    bounds: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)  # per bucket, the last one +Inf; not cumulative
    total: float = 0.0


@dataclass
class _Family:
    description: str
    kind: MetricKind
    refs: int = 0
    values: dict[Labels, _Value] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetricValue:
    """One metric as /metrics shows it: a counter's or gauge's `value`, or a histogram's cumulative buckets."""

    labels: Labels
    value: float = 0.0
    buckets: tuple[tuple[float, int], ...] = ()  # (upper bound, cumulative count), the last bound +Inf
    total: float = 0.0  # a histogram's sum of observations
    count: int = 0  # a histogram's number of observations


@dataclass(frozen=True, slots=True)
class FamilyValues:
    name: str
    description: str
    kind: MetricKind
    metrics: tuple[MetricValue, ...]


def labels_key(labels: Mapping[str, str] | None, kind: MetricKind) -> Labels:
    """Check label names and values (strings, Prometheus names, `le` is a histogram's own) and sort them."""
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels must be a dict of strings, got {type(labels).__name__}")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise CustomMetricError(f"label {key!r}: names and values must be strings, got {type(value).__name__}")
        if not _LABEL.fullmatch(key) or key.startswith("__"):
            raise CustomMetricError(f"Invalid label name {key!r}")
        if kind == MetricKind.HISTOGRAM and key == "le":
            raise CustomMetricError("label name 'le' is reserved for a histogram's buckets")
    return tuple(sorted(labels.items()))


def bucket_bounds(buckets: Iterable[float] | None, kind: MetricKind) -> tuple[float, ...]:
    """A histogram's bucket bounds (numbers, strictly increasing); none for the other kinds."""
    if kind != MetricKind.HISTOGRAM:
        if buckets is not None:
            raise CustomMetricError("Failed to create metric. Unexpected buckets found.")
        return ()
    if buckets is None:
        raise CustomMetricError("Failed to create metric. Missing required buckets.")
    try:
        bounds = tuple(float(b) for b in buckets)
    except (TypeError, ValueError):
        raise TypeError("buckets must be a list of numbers") from None
    if any(math.isnan(b) for b in bounds) or any(a >= b for a, b in itertools.pairwise(bounds)):
        raise CustomMetricError("Error when creating Metric: Bucket Boundaries must be strictly sorted")
    return bounds


class CustomMetrics:
    """The server's store of model-defined metric families (thread-safe)."""

    def __init__(self, reserved: Collection[str] = ()) -> None:
        self._reserved = frozenset(reserved)
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        # leases dropped by the garbage collector, released at the next open or collect: a collection can
        # run inside any allocation, also on a thread that holds the lock (deque.append takes no lock of ours)
        self._dropped: collections.deque[tuple[str, tuple[Labels, ...]]] = collections.deque()

    def release_later(self, name: str, metrics: Iterable[Labels]) -> None:
        """`close_family`, deferred: safe from a finalizer, on any thread, at any point."""
        self._dropped.append((name, tuple(metrics)))

    def open_family(self, name: str, description: str, kind: MetricKind) -> None:
        """Take a lease on family `name` (made if new); refused for a bad name or kind, or another kind."""
        if not isinstance(name, str) or not isinstance(description, str) or not isinstance(kind, MetricKind):
            raise TypeError("MetricFamily(name: str, description: str, kind: MetricFamily.COUNTER, GAUGE or "
                            f"HISTOGRAM), got ({type(name).__name__}, {type(description).__name__}, {kind!r})")
        if not _NAME.fullmatch(name) or name.startswith("__"):
            raise CustomMetricError(f"Invalid metric name {name!r}")
        if name in self._reserved:
            raise CustomMetricError(f"'{name}' is one of the server's own metrics")
        self._release_dropped()
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(description, kind)
            elif family.kind != kind:
                raise CustomMetricError(
                    f"Family name already exists with different type ('{name}' is a {family.kind.name})"
                )
            family.refs += 1

    def close_family(self, name: str, metrics: Iterable[Labels]) -> None:
        """Release a family lease and the metric leases taken through it."""
        with self._lock:
            family = self._families.get(name)
            if family is None:
                return
            for labels in metrics:
                value = family.values.get(labels)
                if value is not None:
                    value.refs -= 1
                    if value.refs <= 0:
                        del family.values[labels]
            family.refs -= 1
            if family.refs <= 0:
                del self._families[name]

    def open_metric(self, name: str, labels: Labels, bounds: tuple[float, ...]) -> None:
        """Take a lease on the metric of family `name` with `labels` (made if new, with `bounds` for a
        histogram; an existing one keeps its own)."""
        with self._lock:
            family = self._family(name)
            value = family.values.get(labels)
            if value is None:
                counts = [0] * (len(bounds) + 1) if family.kind == MetricKind.HISTOGRAM else []
                family.values[labels] = _Value(refs=1, bounds=bounds, counts=counts)
            else:
                value.refs += 1

    def increment(self, name: str, labels: Labels, amount: float) -> None:
        amount = _number(amount)
        with self._lock:
            family, value = self._metric(name, labels)
            if family.kind == MetricKind.HISTOGRAM:
                raise CustomMetricError("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment")
            if family.kind == MetricKind.COUNTER and amount < 0:
                raise CustomMetricError(
                    "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."
                )
            value.value += amount

    def set(self, name: str, labels: Labels, amount: float) -> None:
        amount = _number(amount)
        with self._lock:
            family, value = self._metric(name, labels)
            if family.kind != MetricKind.GAUGE:
                raise CustomMetricError(f"TRITONSERVER_METRIC_KIND_{family.kind.name} does not support Set")
            value.value = amount

    def observe(self, name: str, labels: Labels, amount: float) -> None:
        amount = _number(amount)
        with self._lock:
            family, value = self._metric(name, labels)
            if family.kind != MetricKind.HISTOGRAM:
                raise CustomMetricError(f"TRITONSERVER_METRIC_KIND_{family.kind.name} does not support Observe")
            index = next((i for i, bound in enumerate(value.bounds) if amount <= bound), len(value.bounds))
            value.counts[index] += 1
            value.total += amount

    def value(self, name: str, labels: Labels) -> float:
        with self._lock:
            family, value = self._metric(name, labels)
            if family.kind == MetricKind.HISTOGRAM:
                raise CustomMetricError("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")
            return value.value

    def collect(self) -> list[FamilyValues]:
        """Every family with at least one metric, by name; each metric by its labels."""
        self._release_dropped()
        with self._lock:
            return [
                FamilyValues(name, family.description, family.kind,
                             tuple(_snapshot(labels, value) for labels, value in sorted(family.values.items())))
                for name, family in sorted(self._families.items()) if family.values
            ]

    def _release_dropped(self) -> None:
        while self._dropped:
            try:
                name, metrics = self._dropped.popleft()
            except IndexError:  # another thread took the last one
                return
            self.close_family(name, metrics)

    def _family(self, name: str) -> _Family:
        family = self._families.get(name)
        if family is None:
            raise CustomMetricError("Metric has been invalidated.")
        return family

    def _metric(self, name: str, labels: Labels) -> tuple[_Family, _Value]:
        family = self._family(name)
        value = family.values.get(labels)
        if value is None:
            raise CustomMetricError("Metric has been invalidated.")
        return family, value


def _number(amount: float) -> float:
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        raise TypeError(f"the value must be a number, got {type(amount).__name__}")
    return float(amount)


def _snapshot(labels: Labels, value: _Value) -> MetricValue:
    if not value.counts:
        return MetricValue(labels, value.value)
    cumulative, buckets = 0, []
    for bound, count in zip((*value.bounds, math.inf), value.counts, strict=True):
        cumulative += count
        buckets.append((bound, cumulative))
    return MetricValue(labels, buckets=tuple(buckets), total=value.total, count=cumulative)
