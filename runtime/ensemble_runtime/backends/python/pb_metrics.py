"""`pb_utils.MetricFamily` and `pb_utils.Metric`: Triton python_backend's custom metrics API.

A family is made while the runtime runs the model's `initialize`, `execute` or `finalize` (the call's context
names the model version it belongs to, as it names the server for BLS); its metrics are read and updated from any
thread. They appear on /metrics under the names the model gives, beside the server's own. Errors are
`TritonModelException`s with Triton's prefixes ("Error when creating MetricFamily: ...", "Failed to increment
metric value: ...").

Deliberate differences: a `Metric` keeps its family alive (in Triton a family dropped while its metric is still
used invalidates the metric); a name the server's own metrics use is refused.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python.metric_scope import FamilyLease, MetricScope
from ensemble_runtime.backends.python.pb_types import TritonModelException
from ensemble_runtime.custom_metrics import CustomMetricError, Labels, MetricKind, bucket_bounds, labels_key

COUNTER = MetricKind.COUNTER
GAUGE = MetricKind.GAUGE
HISTOGRAM = MetricKind.HISTOGRAM


def _scope() -> MetricScope:
    target = bls.BLS_TARGET.get()
    if target is None or target.metrics is None:
        raise TritonModelException(
            "Error when creating MetricFamily: a MetricFamily can only be made while the runtime runs this "
            "model's initialize, execute or finalize"
        )
    return target.metrics


class MetricFamily:
    """A named family of metrics of one kind; `Metric(labels, buckets)` makes (or finds) one of them."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        scope = _scope()
        try:
            self._lease: FamilyLease = scope.lease(name, description, kind)
        except CustomMetricError as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None
        self._kind = kind
        weakref.finalize(self, self._lease.close_later)

    def Metric(  # Triton's name
        self, labels: Mapping[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        try:
            bounds = bucket_bounds(buckets, self._kind)
        except CustomMetricError as exc:  # checked before the metric is asked for, in Triton's stub too
            raise TritonModelException(str(exc)) from None
        try:
            key = labels_key(labels, self._kind)
            self._lease.metric(key, bounds)
        except CustomMetricError as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        return Metric(self, self._lease, key)


class Metric:
    """One metric of a family (its labels): `increment`, `set`, `observe` and `value` as its kind allows."""

    def __init__(self, family: MetricFamily, lease: FamilyLease, labels: Labels) -> None:
        self._family = family  # a metric in use keeps its family's lease
        self._store = lease.store
        self._name = lease.name
        self._labels = labels

    def increment(self, value: float) -> None:
        try:
            self._store.increment(self._name, self._labels, value)
        except CustomMetricError as exc:
            raise TritonModelException(f"Failed to increment metric value: {exc}") from None

    def set(self, value: float) -> None:
        try:
            self._store.set(self._name, self._labels, value)
        except CustomMetricError as exc:
            raise TritonModelException(f"Failed to set metric value: {exc}") from None

    def observe(self, value: float) -> None:
        try:
            self._store.observe(self._name, self._labels, value)
        except CustomMetricError as exc:
            raise TritonModelException(f"Failed to observe metric value: {exc}") from None

    def value(self) -> float:
        try:
            return self._store.value(self._name, self._labels)
        except CustomMetricError as exc:
            raise TritonModelException(f"Failed to get metric value: {exc}") from None
