"""Prometheus metrics with Triton's names, read from the registry at scrape time (no global registry), and the
metric families Python models define (`custom_metrics.py`).

Each family is a prometheus_client `Metric` whose samples carry the family's own name, as Triton writes them: a
counter is `nv_inference_count`, not `nv_inference_count_total` (protocol/metrics_text.py renders them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ensemble_runtime.custom_metrics import CustomMetrics, FamilyValues, MetricKind
from ensemble_runtime.gpu.gauges import GpuGauges, GpuReading
from ensemble_runtime.host_metrics import HostSampler, HostValues
from ensemble_runtime.metrics_text import value_text
from ensemble_runtime.python_gc import PythonGc
from ensemble_runtime.registry import Registry
from ensemble_runtime.response_cache import ResponseCache
from ensemble_runtime.stats import FAILURE_REASONS, Duration, ModelStats
from ensemble_runtime.storage import Storage
from ensemble_runtime.tls_watch import Renewals

_LABELS = ["model", "version"]


class _Family(Metric):
    """A family whose `add_metric` takes label values in the order of its label names, as the
    prometheus_client families do, and names each sample after the family."""

    def __init__(self, name: str, documentation: str, typ: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, typ)
        self._label_names = tuple(labels)

    def add_metric(self, values: Sequence[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._label_names, values, strict=True)), value)


def _counter(name: str, documentation: str, labels: Sequence[str]) -> _Family:
    return _Family(name, documentation, "counter", labels)


def _gauge(name: str, documentation: str, labels: Sequence[str]) -> _Family:
    return _Family(name, documentation, "gauge", labels)




def _us(duration: Duration) -> int:
    return duration.ns // 1000  # whole microseconds, as Triton counts them


# the per-version counters Triton keeps: (name, Triton's help text, what it counts)
_PER_VERSION: tuple[tuple[str, str, Callable[[ModelStats], int]], ...] = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes",
     lambda s: s.success.count),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)",
     lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)",
     lambda s: s.execution_count),
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)", lambda s: _us(s.success)),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)", lambda s: _us(s.queue)),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     lambda s: _us(s.compute_input)),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)",
     lambda s: _us(s.compute_infer)),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached requests)",
     lambda s: _us(s.compute_output)),
)


class RuntimeCollector(Collector):
    def __init__(self, registry: Registry, storage: Storage | None = None,
                 settle: Callable[[], None] | None = None, custom: CustomMetrics | None = None,
                 host: HostSampler | None = None, gpus: GpuGauges | None = None,
                 cache: ResponseCache | None = None, tls: Renewals | None = None,
                 python_gc: PythonGc | None = None) -> None:
        self._registry = registry
        self._python_gc = python_gc
        self._tls = tls
        self._cache = cache
        self._storage = storage
        self._settle = settle  # counts what was answered and not yet counted (DataPlane.settle_answered)
        self._custom = custom
        self._host = host
        self._gpus = gpus

    def collect(self) -> Iterator[Metric]:
        if self._settle is not None:
            self._settle()
        counters = [(_counter(name, help_text, _LABELS), count) for name, help_text, count in _PER_VERSION]
        failure = _counter("nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
                           ["model", "reason", "version"])
        pending = _gauge("nv_inference_pending_request_count",
                         "Instantaneous number of pending requests awaiting execution per-model.", _LABELS)
        ready = _gauge("ensemble_model_ready", "1 when the model version serves traffic", labels=_LABELS)
        served = _gauge(
            "ensemble_served_version", "Version each step of an ensemble runs now", labels=["ensemble", "step", "model"]
        )
        failures = _gauge(
            "ensemble_model_load_failure", "1 when the latest load of a model version failed", labels=_LABELS
        )
        cached = [(_counter(name, help_text, _LABELS), count) for name, help_text, count in _PER_CACHED_VERSION]
        for name, rec in sorted(self._registry.records.items()):
            for number, lv in sorted(rec.versions.items()):
                labels = [name, str(number)]
                stats = lv.stats
                for family, counted in counters:
                    family.add_metric(labels, counted(stats))
                for reason in FAILURE_REASONS:
                    failure.add_metric([name, reason, str(number)], stats.fail_reasons.get(reason, 0))
                pending.add_metric(labels, lv.scheduler.pending() if lv.scheduler is not None else 0)
                ready.add_metric(labels, 1.0 if number in rec.served else 0.0)
                if self._cache is not None and lv.config.response_cache.enable:
                    for family, counted in cached:
                        family.add_metric(labels, counted(stats))
                failures.add_metric(labels, 1.0 if lv.state.value == "UNAVAILABLE" else 0.0)
            if rec.ensemble is not None:
                for index, lv in sorted(rec.ensemble.steps.items()):
                    served.add_metric([name, str(index), lv.model], lv.version)
        first, *rest = (family for family, _ in counters)
        yield from (first, failure, *rest, pending, ready, served, failures)
        if self._cache is not None:
            yield from (family for family, _ in cached)
            yield from _cache_metrics(self._cache)
        if self._host is not None:
            yield from _host_metrics(self._host.read())
        if self._gpus is not None:
            yield from _gpu_metrics(self._gpus.read())
        if self._storage is not None:
            yield from self._storage_metrics(self._storage)
        if self._tls is not None:
            yield from _tls_metrics(self._tls)
        if self._python_gc is not None:
            yield from _python_gc_metrics(self._python_gc)
        if self._custom is not None:
            yield from (_custom_family(values) for values in self._custom.collect())

    @staticmethod
    def _storage_metrics(storage: Storage) -> Iterator[Metric]:
        reachable = _gauge("ensemble_repository_reachable", "1 when the last sync listed the source", labels=["source"])
        failures = _counter("ensemble_repository_sync_failures", "Syncs whose listing failed", labels=["source"])
        errors = _gauge("ensemble_repository_fetch_errors", "Models or versions the last sync could not fetch", labels=["source"])
        last = _gauge("ensemble_repository_last_sync_timestamp_seconds", "Time of the last listing that worked", labels=["source"])
        for status in storage.status:
            reachable.add_metric([status.label], 0.0 if status.error else 1.0)
            failures.add_metric([status.label], status.failures)
            errors.add_metric([status.label], len(status.errors))
            last.add_metric([status.label], status.last_success)
        yield from (reachable, failures, errors, last)


def _tls_metrics(renewals: Renewals) -> Iterator[Metric]:
    counted = _counter("ensemble_grpc_tls_renewals", "Renewed TLS files of the gRPC port, taken or refused",
                       ["result"])
    counted.add_metric(["taken"], renewals.taken)
    counted.add_metric(["refused"], renewals.refused)
    refusing = _gauge("ensemble_grpc_tls_renewal_refused",
                      "1 while the TLS files there now are refused and the gRPC port serves older ones", ())
    refusing.add_metric((), 1.0 if renewals.refusing else 0.0)
    yield from (counted, refusing)


def _python_gc_metrics(python_gc: PythonGc) -> Iterator[Metric]:
    reading = python_gc.read()
    collections = _counter("ensemble_python_gc_collections", "Collections Python's cyclic collector made, per "
                           "generation (2: the oldest)", ["generation"])
    for generation, count in enumerate(reading.collections):
        collections.add_metric([str(generation)], count)
    frozen = _gauge("ensemble_python_gc_frozen_objects", "Objects frozen out of the collector's passes "
                    "(--python-gc=tuned: what is loaded)", ())
    frozen.add_metric((), reading.frozen)
    settles = _counter("ensemble_python_gc_settles", "Times the heap was thawed, collected whole and frozen again "
                       "(after the initial load, and when the versions loaded change)", ())
    settles.add_metric((), reading.settles)
    seconds = _counter("ensemble_python_gc_settle_seconds", "Time those settles took, in all (the event loop "
                       "waits on each)", ())
    seconds.add_metric((), reading.settle_seconds)
    yield from (collections, frozen, settles, seconds)


_GPU_GAUGES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge"),
    ("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server started", "counter"),
)


# the response cache's per-version counters, for the versions that use it (Triton's names and help texts)
_PER_CACHED_VERSION: tuple[tuple[str, str, Callable[[ModelStats], int]], ...] = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds",
     lambda s: _us(s.cache_hit)),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", lambda s: s.cache_miss.count),
    ("nv_cache_miss_duration_per_model", "Total cache miss (insert+lookup) duration per model, in microseconds",
     lambda s: _us(s.cache_miss)),
)
# the response cache's own gauges (Triton's)
_CACHE_GAUGES: tuple[tuple[str, str, Callable[[ResponseCache], float]], ...] = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]", lambda c: c.utilization()),
    ("nv_cache_num_entries", "Number of responses stored in response cache", len),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda c: c.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda c: c.misses),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda c: c.lookups),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache", lambda c: c.evictions),
    ("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds",
     lambda c: c.lookup_ns // 1000),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds",
     lambda c: c.insertion_ns // 1000),
)


def _cache_metrics(cache: ResponseCache) -> Iterator[Metric]:
    for name, help_text, value in _CACHE_GAUGES:
        family = _gauge(name, help_text, ())
        family.add_metric((), value(cache))
        yield family


# what the server's own families are called: a model's families may not take these names
SERVER_METRIC_NAMES = frozenset({
    *(name for name, _, _ in _PER_VERSION), "nv_inference_request_failure", "nv_inference_pending_request_count",
    "nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes", *(n for n, _, _ in _GPU_GAUGES),
    *(n for n, _, _ in _PER_CACHED_VERSION), *(n for n, _, _ in _CACHE_GAUGES),
    "ensemble_model_ready", "ensemble_served_version", "ensemble_model_load_failure", "ensemble_repository_reachable",
    "ensemble_repository_sync_failures", "ensemble_repository_fetch_errors",
    "ensemble_repository_last_sync_timestamp_seconds", "ensemble_grpc_tls_renewals", "ensemble_grpc_tls_renewal_refused",
    "ensemble_python_gc_collections", "ensemble_python_gc_frozen_objects", "ensemble_python_gc_settles",
    "ensemble_python_gc_settle_seconds",
})


def _host_metrics(values: HostValues | None) -> Iterator[Metric]:
    if values is None:
        return
    for name, help_text, value in (
        ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", values.utilization),
        ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", values.memory_total_bytes),
        ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", values.memory_used_bytes),
    ):
        family = _gauge(name, help_text, ())
        family.add_metric((), value)
        yield family


def _gpu_metrics(readings: list[GpuReading]) -> Iterator[Metric]:
    for name, help_text, kind in _GPU_GAUGES:
        family = _Family(name, help_text, kind, ["gpu_uuid"])
        for reading in readings:
            if name in reading.values:
                family.add_metric([reading.uuid], reading.values[name])
        if family.samples:
            yield family


def _custom_family(values: FamilyValues) -> Metric:
    family = Metric(values.name, values.description, values.kind.name.lower())
    for metric in values.metrics:
        labels = dict(metric.labels)
        if values.kind != MetricKind.HISTOGRAM:
            family.add_sample(values.name, labels, metric.value)
            continue
        for bound, count in metric.buckets:
            family.add_sample(f"{values.name}_bucket", {**labels, "le": value_text(bound)}, count)
        family.add_sample(f"{values.name}_sum", labels, metric.total)
        family.add_sample(f"{values.name}_count", labels, metric.count)
    return family


def build_metrics_registry(registry: Registry, storage: Storage | None = None,
                           settle: Callable[[], None] | None = None, custom: CustomMetrics | None = None,
                           host: HostSampler | None = None, gpus: GpuGauges | None = None,
                           cache: ResponseCache | None = None, tls: Renewals | None = None,
                           python_gc: PythonGc | None = None) -> CollectorRegistry:
    metrics = CollectorRegistry(auto_describe=False)
    metrics.register(RuntimeCollector(registry, storage, settle, custom, host, gpus, cache, tls, python_gc))
    return metrics
