"""A model version's leases on the server's custom metrics (`custom_metrics.CustomMetrics`).

Each `pb_utils.MetricFamily` a model makes holds one `FamilyLease`: the family, and the metrics made through it.
A lease is released when its `MetricFamily` is garbage-collected (as Triton deletes a family with its Python
object) or, at the latest, when the version unloads (`MetricScope.close`): a model's metrics never outlive it.
"""

from __future__ import annotations

import threading

from ensemble_runtime.custom_metrics import CustomMetricError, CustomMetrics, Labels, MetricKind


class FamilyLease:
    """One family lease and the metric leases taken through it (each set of labels once)."""

    def __init__(self, store: CustomMetrics, name: str) -> None:
        self.store = store
        self.name = name
        self._labels: set[Labels] = set()
        self._lock = threading.Lock()
        self.closed = False

    def metric(self, labels: Labels, bounds: tuple[float, ...]) -> None:
        with self._lock:
            if self.closed:
                raise CustomMetricError("Metric has been invalidated.")
            if labels not in self._labels:
                self.store.open_metric(self.name, labels, bounds)
                self._labels.add(labels)

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self.store.close_family(self.name, self._labels)

    def close_later(self) -> None:
        """`close` from a finalizer: the store releases it at its next open or collect."""
        with self._lock:  # never held by the thread running this: that thread holds the MetricFamily
            if not self.closed:
                self.closed = True
                self.store.release_later(self.name, self._labels)


class MetricScope:
    """A model version's family leases; `close` (at unload) releases those still held."""

    def __init__(self, store: CustomMetrics) -> None:
        self.store = store
        self._leases: list[FamilyLease] = []
        self._lock = threading.Lock()
        self._closed = False

    def lease(self, name: str, description: str, kind: MetricKind) -> FamilyLease:
        with self._lock:
            if self._closed:
                raise CustomMetricError("the model is unloaded")
            self.store.open_family(name, description, kind)
            lease = FamilyLease(self.store, name)
            self._leases = [held for held in self._leases if not held.closed]  # what finalizers released
            self._leases.append(lease)
            return lease

    def close(self) -> None:
        with self._lock:
            self._closed = True
            leases, self._leases = self._leases, []
        for lease in leases:
            lease.close()
