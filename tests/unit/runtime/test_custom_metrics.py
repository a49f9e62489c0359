"""The store of model-defined metrics (custom_metrics.py), the leases on it (metric_scope.py), the pb_utils API
over them (pb_metrics.py) and the text /metrics writes (metrics_text.py)."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator

import pytest
from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python import pb_utils as pb
from ensemble_runtime.backends.python.metric_scope import MetricScope
from ensemble_runtime.custom_metrics import CustomMetricError, CustomMetrics, MetricKind, MetricValue
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.metrics import SERVER_METRIC_NAMES, build_metrics_registry
from ensemble_runtime.metrics_text import render, value_text
from ensemble_runtime.registry import Registry
from prometheus_client import CollectorRegistry


def test_families_are_shared_by_name_and_kind() -> None:
    store = CustomMetrics()
    store.open_family("latency", "first words", MetricKind.COUNTER)
    store.open_family("latency", "other words", MetricKind.COUNTER)  # the same family, the first description
    with pytest.raises(CustomMetricError, match="Family name already exists with different type"):
        store.open_family("latency", "first words", MetricKind.GAUGE)
    labels = (("model", "m"),)
    store.open_metric("latency", labels, ())
    store.open_metric("latency", labels, ())  # the same labels: the same value
    store.increment("latency", labels, 2)
    store.increment("latency", labels, 0.5)
    [family] = store.collect()
    assert (family.name, family.description, family.kind) == ("latency", "first words", MetricKind.COUNTER)
    assert family.metrics == (MetricValue(labels, 2.5),)


@pytest.mark.parametrize("name", ["9starts_with_digit", "has-dash", "__reserved", "", "sp ace"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(CustomMetricError, match="Invalid metric name"):
        CustomMetrics().open_family(name, "d", MetricKind.GAUGE)


def test_the_servers_own_names_are_refused() -> None:
    store = CustomMetrics(reserved=SERVER_METRIC_NAMES)
    with pytest.raises(CustomMetricError, match="one of the server's own metrics"):
        store.open_family("nv_inference_count", "d", MetricKind.COUNTER)
    assert store.collect() == []


def test_each_kind_allows_its_own_operations() -> None:
    store = CustomMetrics()
    for name, kind in (("c", MetricKind.COUNTER), ("g", MetricKind.GAUGE), ("h", MetricKind.HISTOGRAM)):
        store.open_family(name, "d", kind)
        store.open_metric(name, (), (1.0, 5.0) if kind == MetricKind.HISTOGRAM else ())
    with pytest.raises(CustomMetricError, match="non-negative"):
        store.increment("c", (), -1)
    with pytest.raises(CustomMetricError, match="COUNTER does not support Set"):
        store.set("c", (), 3)
    with pytest.raises(CustomMetricError, match="GAUGE does not support Observe"):
        store.observe("g", (), 3)
    with pytest.raises(CustomMetricError, match="HISTOGRAM does not support Increment"):
        store.increment("h", (), 1)
    with pytest.raises(CustomMetricError, match="HISTOGRAM does not support Value"):
        store.value("h", ())
    store.increment("g", (), -2)
    store.set("g", (), 7)
    store.increment("g", (), -0.5)
    assert store.value("g", ()) == 6.5
    for observed in (0.5, 1.0, 3, 9, 9):
        store.observe("h", (), observed)
    histogram = next(f for f in store.collect() if f.name == "h").metrics[0]
    assert histogram.buckets == ((1.0, 2), (5.0, 3), (float("inf"), 5))  # cumulative, bounds inclusive
    assert (histogram.total, histogram.count) == (22.5, 5)
    with pytest.raises(TypeError):
        store.increment("c", (), "1")  # type: ignore[arg-type]


def test_a_released_lease_takes_its_metrics_and_the_last_its_family() -> None:
    store = CustomMetrics()
    store.open_family("f", "d", MetricKind.GAUGE)
    store.open_family("f", "d", MetricKind.GAUGE)
    a, b = (("k", "a"),), (("k", "b"),)
    store.open_metric("f", a, ())
    store.open_metric("f", b, ())
    store.open_metric("f", b, ())
    store.close_family("f", [a, b])  # the first lease: `a` goes, `b` is still held once
    assert [m.labels for m in store.collect()[0].metrics] == [b]
    with pytest.raises(CustomMetricError, match="invalidated"):
        store.set("f", a, 1)
    store.close_family("f", [b])
    assert store.collect() == []


def test_labels_and_buckets_are_checked() -> None:
    from ensemble_runtime.custom_metrics import bucket_bounds, labels_key

    assert labels_key({"z": "1", "a": "2"}, MetricKind.GAUGE) == (("a", "2"), ("z", "1"))
    assert labels_key(None, MetricKind.GAUGE) == ()
    for bad, words in (({"a-b": "1"}, "Invalid label name"), ({"__x": "1"}, "Invalid label name"),
                       ({"a": 1}, "must be strings")):
        with pytest.raises(CustomMetricError, match=words):
            labels_key(bad, MetricKind.GAUGE)  # type: ignore[arg-type]
    with pytest.raises(CustomMetricError, match="'le' is reserved"):
        labels_key({"le": "1"}, MetricKind.HISTOGRAM)
    assert bucket_bounds([1, 2.5], MetricKind.HISTOGRAM) == (1.0, 2.5)
    with pytest.raises(CustomMetricError, match="Missing required buckets"):
        bucket_bounds(None, MetricKind.HISTOGRAM)
    with pytest.raises(CustomMetricError, match="strictly sorted"):
        bucket_bounds([2, 1], MetricKind.HISTOGRAM)
    with pytest.raises(CustomMetricError, match="Unexpected buckets"):
        bucket_bounds([1], MetricKind.COUNTER)


@pytest.fixture
def scope() -> Iterator[MetricScope]:
    """A model call's context: BLS and the metric scope of one version, as the Python backend sets them."""

    async def caller(request: InferRequest) -> InferResponse:
        raise AssertionError("not called")

    loop = asyncio.new_event_loop()
    metric_scope = MetricScope(CustomMetrics(reserved=SERVER_METRIC_NAMES))
    token = bls.BLS_TARGET.set(bls.BlsTarget(caller=caller, loop=loop, model_name="m", metrics=metric_scope))
    yield metric_scope
    bls.BLS_TARGET.reset(token)
    loop.close()


def test_the_pb_utils_api_as_triton_names_it(scope: MetricScope) -> None:
    family = pb.MetricFamily(name="requests_ns", description="d", kind=pb.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m", "version": "1"})
    metric.increment(10)
    assert metric.value() == 10.0
    gauge = pb.MetricFamily("queue_depth", "d", pb.GAUGE).Metric()  # the metric keeps its family
    gc.collect()
    gauge.set(3)
    assert gauge.value() == 3.0
    histogram = pb.MetricFamily("sizes", "d", pb.HISTOGRAM).Metric(buckets=[1, 10])
    histogram.observe(4)
    with pytest.raises(pb.TritonModelException, match=r"Failed to increment metric value: .*non-negative"):
        metric.increment(-1)
    with pytest.raises(pb.TritonModelException, match=r"Failed to set metric value: .*COUNTER does not support Set"):
        metric.set(1)
    with pytest.raises(pb.TritonModelException, match="Failed to get metric value"):
        histogram.value()
    with pytest.raises(pb.TritonModelException, match=r"Error when creating MetricFamily: .*different type"):
        pb.MetricFamily("requests_ns", "d", pb.GAUGE)
    with pytest.raises(pb.TritonModelException, match=r"^Failed to create metric\. Missing required buckets"):
        pb.MetricFamily("sizes", "d", pb.HISTOGRAM).Metric()
    with pytest.raises(TypeError):
        pb.MetricFamily("other", "d", 7)  # type: ignore[arg-type]
    assert pb.MetricKind.COUNTER == pb.COUNTER == pb.MetricFamily.COUNTER
    assert [f.name for f in scope.store.collect()] == ["queue_depth", "requests_ns", "sizes"]


def test_a_dropped_family_leaves_and_unload_releases_the_rest(scope: MetricScope) -> None:
    kept = pb.MetricFamily("kept", "d", pb.GAUGE)
    kept.Metric(labels={"a": "1"}).set(1)
    dropped = pb.MetricFamily("dropped", "d", pb.GAUGE)
    dropped.Metric().set(2)
    del dropped
    gc.collect()  # its finalizer only queues the release: the store takes it at the next collect
    assert [f.name for f in scope.store.collect()] == ["kept"]
    scope.close()  # the version unloads
    assert scope.store.collect() == []
    with pytest.raises(pb.TritonModelException, match="invalidated"):
        kept.Metric(labels={"a": "2"})
    with pytest.raises(pb.TritonModelException, match="unloaded"):
        pb.MetricFamily("late", "d", pb.GAUGE)


def test_a_family_outside_a_model_call_is_refused() -> None:
    with pytest.raises(pb.TritonModelException, match="only be made while the runtime runs this model"):
        pb.MetricFamily("f", "d", pb.GAUGE)


def test_metrics_are_updated_from_many_threads(scope: MetricScope) -> None:
    metric = pb.MetricFamily("hits", "d", pb.COUNTER).Metric()

    def hit() -> None:
        for _ in range(2000):
            metric.increment(1)

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metric.value() == 8000.0


def test_the_text_is_written_as_triton_writes_it(scope: MetricScope) -> None:
    held = [pb.MetricFamily("probe_requests", "Requests\nseen \\ here", pb.COUNTER).Metric(
        labels={"model": "p", "b": 'x"y\n'}), pb.MetricFamily("probe_last", "Last", pb.GAUGE).Metric(),
        pb.MetricFamily("probe_sizes", "Sizes", pb.HISTOGRAM).Metric(labels={"model": "p"}, buckets=[1, 2.5])]
    held[0].increment(2)
    held[1].set(2.5)
    held[2].observe(2)
    registry: CollectorRegistry = build_metrics_registry(Registry(), custom=scope.store)
    text = render(registry.collect()).decode()
    assert "# TYPE nv_inference_request_success counter\n" in text  # no `_total`
    assert "_total" not in text
    expected = (
        "# HELP probe_last Last\n# TYPE probe_last gauge\nprobe_last 2.5\n"
        "# HELP probe_requests Requests\\nseen \\\\ here\n# TYPE probe_requests counter\n"
        'probe_requests{b="x\\"y\\n",model="p"} 2\n'
        "# HELP probe_sizes Sizes\n# TYPE probe_sizes histogram\n"
        'probe_sizes_bucket{model="p",le="1"} 0\nprobe_sizes_bucket{model="p",le="2.5"} 1\n'
        'probe_sizes_bucket{model="p",le="+Inf"} 1\nprobe_sizes_sum{model="p"} 2\nprobe_sizes_count{model="p"} 1\n'
    )
    assert text.endswith(expected)


@pytest.mark.parametrize(("value", "text"), [(5.0, "5"), (0, "0"), (0.25, "0.25"), (-3.0, "-3"),
                                             (float("inf"), "+Inf"), (float("-inf"), "-Inf"), (float("nan"), "NaN"),
                                             (1e300, "1e+300"), (123456789.5, "123456789.5")])
def test_values_are_written_whole_where_they_are(value: float, text: str) -> None:
    assert value_text(value) == text


def test_failure_reasons_as_triton_names_them() -> None:
    from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError, failure_reason, unavailable

    assert failure_reason(asyncio.CancelledError()) == "CANCELED"
    assert failure_reason(InferenceError(ErrorCode.CANCELLED, "gone"), ensemble=True) == "CANCELED"
    assert failure_reason(unavailable("request exceeds maximum queue size 1")) == "REJECTED"
    assert failure_reason(ValueError("model raised")) == "BACKEND"
    assert failure_reason(InferenceError(ErrorCode.INTERNAL, "bad output")) == "BACKEND"
    assert failure_reason(ResponseError(ErrorCode.INTERNAL, "negative input"), ensemble=True) == "OTHER"
