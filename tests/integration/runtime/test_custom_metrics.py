"""A Python model's own metric families (Triton's `pb_utils.MetricFamily`) on /metrics, and the server's own
families under Triton's names, against our runtime and, side by side, the real Triton (where installed).

`py_metrics` (models/py_metrics/model.py) counts requests and elements, keeps the last size in a gauge and
observes its inputs in a histogram; its `initialize` tries 13 misuses of the API and answers what each raised.
tritonserver 2.51 aborts, in one start of two or three, when its server side refuses a metric operation of a
model (boost::interprocess::lock_exception), so side by side it tries only the 4 its python stub refuses; the
other 9 are checked against the words of Triton's core (src/metric_family.cc, prometheus-cpp's checks).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from bench.triton_peer import TritonPeer, not_installed_reason
from tests.integration.runtime import repo
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ServerProcess

_NO_TRITON = not_installed_reason()
_TRITON = pytest.param("triton", marks=[pytest.mark.triton, pytest.mark.skipif(_NO_TRITON is not None,
                                                                               reason=_NO_TRITON or "")])
MODEL = "py_metrics"
# three requests: INPUT0 values observed by the histogram (buckets 0, 1, 10)
REQUESTS = ([0.5, 3.0], [2.0, 20.0, 1.0], [-1.0])
EXPLICIT = ["--model-control-mode=explicit", f"--load-model={MODEL}"]


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each server's: ours tries every misuse, tritonserver only those that cannot abort it."""
    roots = {"ours": tmp_path_factory.mktemp("metrics-repo"), "triton": tmp_path_factory.mktemp("metrics-repo-peer")}
    repo.metrics_model(roots["ours"])
    repo.metrics_model(roots["triton"], misuses="stub")
    return roots


def _process(kind: str, repositories: dict[str, Path]) -> ServerProcess:
    if kind == "triton":
        return TritonPeer([repositories[kind]], EXPLICIT)
    return RuntimeProcess([repositories[kind]], EXPLICIT)


@pytest.fixture(scope="module", params=["ours", _TRITON])
def server(request: pytest.FixtureRequest, repositories: dict[str, Path]) -> Iterator[ServerProcess]:
    with _process(request.param, repositories) as proc:
        proc.wait_model_ready(MODEL)
        yield proc


def _infer(proc: ServerProcess, values: list[float]) -> list[str]:
    with proc.http_client() as client:
        data = np.array(values, np.float32)
        inputs = [httpclient.InferInput(name, [len(values)], "FP32") for name in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(data)
        result = client.infer(MODEL, inputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), data * 2)
        return [m.decode() for m in result.as_numpy("MISUSES")]


def _metrics(proc: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _samples(text: str, prefix: str) -> dict[str, float]:
    """Sample lines whose name starts with `prefix`: the name with its labels sorted -> value."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if match and match.group(1).startswith(prefix):
            labels = ",".join(sorted(re.findall(r'[a-zA-Z_]\w*="(?:[^"\\]|\\.)*"', match.group(2) or "")))
            found[f"{match.group(1)}{{{labels}}}"] = float(match.group(3))
    return found


def _headers(text: str, prefix: str) -> set[str]:
    return {line for line in text.splitlines() if line.startswith(("# HELP " + prefix, "# TYPE " + prefix))}


def _wait_samples(proc: ServerProcess, prefix: str, want: dict[str, float]) -> dict[str, float]:
    """/metrics' samples once they show `want` (a server counts a request just after answering it)."""
    deadline = time.monotonic() + 30
    while True:
        found = _samples(_metrics(proc), prefix)
        if all(found.get(k) == v for k, v in want.items()) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


MODEL_LABEL, VERSION_LABEL = f'model="{MODEL}"', 'version="1"'
EXPECTED = {
    f"py_metrics_requests{{{MODEL_LABEL},{VERSION_LABEL}}}": 3,
    f"py_metrics_elements{{{MODEL_LABEL}}}": 6,
    "py_metrics_last_size{}": 1,
    f'py_metrics_values_bucket{{le="0",{MODEL_LABEL}}}': 1,
    f'py_metrics_values_bucket{{le="1",{MODEL_LABEL}}}': 3,
    f'py_metrics_values_bucket{{le="10",{MODEL_LABEL}}}': 5,
    f'py_metrics_values_bucket{{le="+Inf",{MODEL_LABEL}}}': 6,
    f"py_metrics_values_count{{{MODEL_LABEL}}}": 6,
    f"py_metrics_values_sum{{{MODEL_LABEL}}}": 25.5,
}
HEADERS = {
    "# HELP py_metrics_requests Requests answered", "# TYPE py_metrics_requests counter",
    "# HELP py_metrics_elements Elements added", "# TYPE py_metrics_elements counter",
    "# HELP py_metrics_last_size Size of the last request", "# TYPE py_metrics_last_size gauge",
    "# HELP py_metrics_values INPUT0 values", "# TYPE py_metrics_values histogram",
}


def test_a_models_families_are_on_metrics(server: ServerProcess) -> None:
    for values in REQUESTS:
        _infer(server, list(values))
    assert _wait_samples(server, "py_metrics_", EXPECTED) == EXPECTED
    text = _metrics(server)
    assert _headers(text, "py_metrics_") == HEADERS
    # the server's own families under Triton's names: a counter is not `<name>_total`
    counts = _samples(text, "nv_inference_")
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
        assert f"# TYPE {name} counter" in text.splitlines()
        assert counts[f"{name}{{{MODEL_LABEL},{VERSION_LABEL}}}"] == 3
    assert not re.search(r"^# TYPE \S+_total counter$", text, re.MULTILINE)


def test_unload_takes_the_families_and_a_reload_starts_again(server: ServerProcess) -> None:
    """Ours: a model's families leave /metrics with it and a reload counts from 0. tritonserver keeps them
    (its core never removes a family, DLIS-4072) and a reload counts on: a deliberate difference."""
    _infer(server, [1.0])
    before = _wait_samples(server, "py_metrics_", {})
    with server.http_client() as client:
        client.unload_model(MODEL)
        deadline = time.monotonic() + 30
        while client.is_model_ready(MODEL) and time.monotonic() < deadline:
            time.sleep(0.1)
        if isinstance(server, TritonPeer):
            assert _samples(_metrics(server), "py_metrics_") == before
        else:  # released once its instances have closed (finalize returned), just after it stops being ready
            while _samples(_metrics(server), "py_metrics_") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _samples(_metrics(server), "py_metrics_") == {}
        client.load_model(MODEL)
    server.wait_model_ready(MODEL)
    _infer(server, [4.0, 5.0])
    key = f"py_metrics_requests{{{MODEL_LABEL},{VERSION_LABEL}}}"
    want = {key: before[key] + 1 if isinstance(server, TritonPeer) else 1}
    found = _wait_samples(server, "py_metrics_", want)
    assert found[key] == want[key]


def _outcomes(lines: list[str]) -> dict[str, tuple[str, str]]:
    parsed = {}
    for line in lines:
        what, kind, message = [*line.split(": ", 2), "", ""][:3]
        # tritonserver's stub relays the core's words through the backend: drop that relay's own words
        message = re.sub(r"Failed to process the request for model '[^']*', message: ", "", message)
        parsed[what] = (kind, message)
    return parsed


# what our runtime raises for each misuse: Triton's words (its stub's, or its core's after the stub's prefix)
OURS = {
    "another kind": ("TritonModelException",
                     "Error when creating MetricFamily: Family name already exists with different type"),
    "bad name": ("TritonModelException", "Error when creating MetricFamily: Invalid metric name"),
    "negative count": ("TritonModelException", "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER "
                       "can only be incremented monotonically by non-negative values."),
    "set a counter": ("TritonModelException",
                      "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set"),
    "observe a gauge": ("TritonModelException",
                        "Failed to observe metric value: TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"),
    "increment a histogram": ("TritonModelException", "Failed to increment metric value: "
                              "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"),
    "value of a histogram": ("TritonModelException",
                             "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"),
    "histogram without buckets": ("TritonModelException", "Failed to create metric. Missing required buckets."),
    "unsorted buckets": ("TritonModelException", "Error when creating Metric: Bucket Boundaries must be strictly sorted"),
    "buckets on a counter": ("TritonModelException", "Failed to create metric. Unexpected buckets found."),
    "bad label name": ("TritonModelException", "Error when creating Metric: Invalid label name"),
    "kind not a kind": ("TypeError", ""),
    "increment by text": ("TypeError", ""),
}


def test_misuses_raise_in_the_model_and_the_server_serves_on(server: ServerProcess) -> None:
    outcomes = _outcomes(_infer(server, [1.0]))
    expected = OURS if isinstance(server, RuntimeProcess) else {k: v for k, v in OURS.items() if k in outcomes}
    assert outcomes.keys() == expected.keys()
    for what, (kind, words) in expected.items():
        assert outcomes[what][0] == kind and outcomes[what][1].startswith(words), (what, outcomes[what])
    assert _infer(server, [2.0])  # still serving


@pytest.mark.triton
@pytest.mark.skipif(_NO_TRITON is not None, reason=_NO_TRITON or "")
def test_misuses_raise_what_triton_raises(repositories: dict[str, Path]) -> None:
    outcomes = {}
    for kind in ("ours", "triton"):
        with _process(kind, repositories) as proc:
            proc.wait_model_ready(MODEL)
            outcomes[kind] = _outcomes(_infer(proc, [1.0]))
    ours, triton = outcomes["ours"], outcomes["triton"]
    assert len(triton) == 4 and triton.keys() < ours.keys()
    for what, (kind, message) in triton.items():
        assert ours[what][0] == kind, (what, ours[what], triton[what])
        if kind == "TritonModelException":  # the same words, ours with the name or kind where it says more
            assert ours[what][1].startswith(message), (what, ours[what][1], message)
