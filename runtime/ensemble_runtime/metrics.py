"""Prometheus metrics with Triton's names, read from the registry at scrape time (no global registry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ensemble_runtime.registry import Registry
from ensemble_runtime.storage import Storage

_LABELS = ["model", "version"]


class RuntimeCollector(Collector):
    def __init__(self, registry: Registry, storage: Storage | None = None,
                 settle: Callable[[], None] | None = None) -> None:
        self._registry = registry
        self._storage = storage
        self._settle = settle  # counts what was answered and not yet counted (DataPlane.settle_answered)

    def collect(self) -> Iterator[Metric]:
        if self._settle is not None:
            self._settle()
        success = CounterMetricFamily("nv_inference_request_success", "Number of successful inference requests", labels=_LABELS)
        failure = CounterMetricFamily("nv_inference_request_failure", "Number of failed inference requests", labels=_LABELS)
        count = CounterMetricFamily("nv_inference_count", "Number of inferences performed (batch elements)", labels=_LABELS)
        execs = CounterMetricFamily("nv_inference_exec_count", "Number of model executions performed", labels=_LABELS)
        durations = {
            "success": CounterMetricFamily("nv_inference_request_duration_us", "Cumulative request duration", labels=_LABELS),
            "queue": CounterMetricFamily("nv_inference_queue_duration_us", "Cumulative time requests spent queued", labels=_LABELS),
            "compute_input": CounterMetricFamily(
                "nv_inference_compute_input_duration_us", "Cumulative compute input duration", labels=_LABELS
            ),
            "compute_infer": CounterMetricFamily(
                "nv_inference_compute_infer_duration_us", "Cumulative compute inference duration", labels=_LABELS
            ),
            "compute_output": CounterMetricFamily(
                "nv_inference_compute_output_duration_us", "Cumulative compute output duration", labels=_LABELS
            ),
        }
        ready = GaugeMetricFamily("ensemble_model_ready", "1 when the model version serves traffic", labels=_LABELS)
        served = GaugeMetricFamily(
            "ensemble_served_version", "Version each step of an ensemble runs now", labels=["ensemble", "step", "model"]
        )
        failures = GaugeMetricFamily(
            "ensemble_model_load_failure", "1 when the latest load of a model version failed", labels=_LABELS
        )
        for name, rec in sorted(self._registry.records.items()):
            for number, lv in sorted(rec.versions.items()):
                labels = [name, str(number)]
                stats = lv.stats
                success.add_metric(labels, stats.success.count)
                failure.add_metric(labels, stats.fail.count)
                count.add_metric(labels, stats.inference_count)
                execs.add_metric(labels, stats.execution_count)
                for key, family in durations.items():
                    family.add_metric(labels, getattr(stats, key).ns / 1000)
                ready.add_metric(labels, 1.0 if number in rec.served else 0.0)
                failures.add_metric(labels, 1.0 if lv.state.value == "UNAVAILABLE" else 0.0)
            if rec.ensemble is not None:
                for index, lv in sorted(rec.ensemble.steps.items()):
                    served.add_metric([name, str(index), lv.model], lv.version)
        yield from (success, failure, count, execs, *durations.values(), ready, served, failures)
        if self._storage is not None:
            yield from self._storage_metrics(self._storage)

    @staticmethod
    def _storage_metrics(storage: Storage) -> Iterator[Metric]:
        reachable = GaugeMetricFamily("ensemble_repository_reachable", "1 when the last sync listed the source", labels=["source"])
        failures = CounterMetricFamily("ensemble_repository_sync_failures", "Syncs whose listing failed", labels=["source"])
        errors = GaugeMetricFamily("ensemble_repository_fetch_errors", "Models or versions the last sync could not fetch", labels=["source"])
        last = GaugeMetricFamily("ensemble_repository_last_sync_timestamp_seconds", "Time of the last listing that worked", labels=["source"])
        for status in storage.status:
            reachable.add_metric([status.label], 0.0 if status.error else 1.0)
            failures.add_metric([status.label], status.failures)
            errors.add_metric([status.label], len(status.errors))
            last.add_metric([status.label], status.last_success)
        yield from (reachable, failures, errors, last)


def build_metrics_registry(registry: Registry, storage: Storage | None = None,
                           settle: Callable[[], None] | None = None) -> CollectorRegistry:
    metrics = CollectorRegistry(auto_describe=False)
    metrics.register(RuntimeCollector(registry, storage, settle))
    return metrics
