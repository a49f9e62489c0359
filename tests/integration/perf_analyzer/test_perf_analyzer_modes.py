"""perf_analyzer's other load modes, unchanged, against the runtime serving the models NVIDIA's examples use
(`ensemble_examples.triton_repository`): batches (`-b`), its default random data on an image model, data from a
JSON file, open-loop request rates, sequences (sync, async and streamed, with `--sequence-length`) and a decoupled
model under periodic concurrency. Each completes and reports a throughput, and the server serves on.

Found this way: `densenet_onnx` failed perf_analyzer's default random data (NaNs among its bits); the stand-in
model now answers any image. Needs perf_analyzer (tools/setup-perf-analyzer.sh); skipped without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples.triton_repository import build_triton_examples

from bench.perf_analyzer import find_perf_analyzer, not_installed_reason, run_perf_analyzer
from tests.integration.triton_examples.support import simple_data, simple_inputs
from tests.support.runtime_process import RuntimeProcess

_REASON = not_installed_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

MODELS = ("simple", "simple_sequence", "simple_dyna_sequence", "densenet_onnx", "repeat_int32")
COUNTED = ["--measurement-mode", "count_windows", "--measurement-request-count", "20", "-s", "1000",
           "--max-trials", "5"]
TIMED = ["--measurement-interval", "1000", "-s", "1000", "--max-trials", "5"]
REPEAT = ["--shape", "IN:4", "--shape", "DELAY:4", "--shape", "WAIT:1", "--input-data", "zero"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("examples")
    build_triton_examples(root, MODELS)
    (root / "simple.json").write_text(json.dumps({"data": [{"INPUT0": list(range(16)), "INPUT1": [1] * 16}]}))
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([root]) as runtime:
        runtime.wait_ready(120)
        for model in MODELS:
            runtime.wait_model_ready(model)
        yield runtime


CASES = [
    pytest.param("simple", "grpc", ["-b", "4", *COUNTED], id="grpc-batch-4"),
    pytest.param("simple", "http", ["-b", "8", "--input-data", "zero", *COUNTED], id="http-batch-8-zero"),
    pytest.param("simple", "grpc", ["--input-data", "{root}/simple.json", *COUNTED], id="grpc-json-data"),
    pytest.param("simple", "http", ["--request-rate-range", "200", *TIMED], id="http-request-rate"),
    pytest.param("densenet_onnx", "grpc", COUNTED, id="grpc-image-random-data"),
    pytest.param("simple_sequence", "grpc", ["--sequence-length", "5", "--concurrency-range", "2", *COUNTED],
                 id="grpc-sequence"),
    pytest.param("simple_sequence", "grpc", ["--streaming", "--sequence-length", "4", "--concurrency-range", "2",
                                             *COUNTED], id="grpc-sequence-streaming"),
    pytest.param("simple_dyna_sequence", "http", ["-a", "--sequence-length", "4", "--concurrency-range", "3",
                                                  *COUNTED], id="http-dyna-sequence-async"),
    pytest.param("simple_sequence", "grpc", ["--request-rate-range", "100", "--sequence-length", "3",
                                             "--num-of-sequences", "4", *TIMED], id="grpc-sequence-request-rate"),
    pytest.param("repeat_int32", "grpc", ["--streaming", "--periodic-concurrency-range", "1:3:1",
                                          "--request-period", "2", *REPEAT, "--profile-export-file",
                                          "{root}/periodic.json"], id="grpc-decoupled-periodic"),
]


@pytest.mark.parametrize(("model", "protocol", "args"), CASES)
def test_perf_analyzer_mode_completes(server: RuntimeProcess, root: Path, model: str, protocol: str,
                                      args: list[str]) -> None:
    binary = find_perf_analyzer()
    assert binary is not None
    url = server.grpc_url if protocol == "grpc" else server.http_url
    filled = [arg.format(root=root) for arg in args]
    measured = run_perf_analyzer(binary, model, url, ["-i", protocol, *filled], timeout=180)
    assert measured.returncode == 0, f"{' '.join(measured.command)}\n{measured.output[-3000:]}"
    if "--periodic-concurrency-range" in args:  # reports no window: each request's responses go to the export
        _check_periodic_export(root / "periodic.json")
    else:
        assert measured.throughput > 0, measured.output[-3000:]
    with server.grpc_client() as client:  # the server serves on
        in0, in1 = simple_data()
        result = client.infer("simple", simple_inputs(grpcclient, in0, in1))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), in0 + in1)


def _check_periodic_export(path: Path) -> None:
    """Concurrency 1 to 3 in steps of 1: three requests, each answered IDX 0..3 (IN has 4 elements) and then the
    final flag alone (perf_analyzer records it as an empty response)."""
    experiments = json.loads(path.read_text())["experiments"]
    requests = [request for experiment in experiments for request in experiment["requests"]]
    assert len(requests) >= 3, requests
    for request in requests:
        indices = [response["IDX"] for response in request["response_outputs"]]
        assert indices == [0, 1, 2, 3, ""], request


def test_perf_analyzer_sets_the_trace_settings(root: Path, tmp_path: Path) -> None:
    """perf_analyzer's `--trace-level`, `--trace-rate` and `--log-frequency` set the server's trace settings
    through the trace extension before it measures; the server then writes one file per 5 traced requests, one
    request in 10 traced."""
    trace_file = tmp_path / "trace.json"
    with RuntimeProcess([root], [f"--trace-config=triton,file={trace_file}"]) as runtime:
        runtime.wait_model_ready("simple", 120)
        binary = find_perf_analyzer()
        assert binary is not None
        measured = run_perf_analyzer(binary, "simple", runtime.grpc_url,
                                     ["-i", "grpc", "--trace-level", "TIMESTAMPS", "--trace-rate", "10",
                                      "--log-frequency", "5", *COUNTED], timeout=180)
        assert measured.returncode == 0, f"{' '.join(measured.command)}\n{measured.output[-3000:]}"
        with runtime.grpc_client() as client:
            settings = client.get_trace_settings(as_json=True)["settings"]
            served = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert {name: settings[name]["value"] for name in ("trace_level", "trace_rate", "log_frequency")} == {
        "trace_level": ["TIMESTAMPS"], "trace_rate": ["10"], "log_frequency": ["5"]}
    requests = int(served["inference_stats"]["success"]["count"])
    files = list(tmp_path.glob("trace.json.*"))
    traced = [r for f in files for r in json.loads(f.read_text()) if "model_name" in r]
    assert {r["model_name"] for r in traced} == {"simple"}
    # every 10th request traced (the one at stop written too); perf_analyzer's requests are all counted
    assert len(traced) == (requests + 9) // 10 and len(files) == (len(traced) + 4) // 5
