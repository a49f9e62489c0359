"""NVIDIA's perf_analyzer, unchanged, completes against the runtime: every protocol and mode, single model and
ensemble, without `-x` (so it reads the server's statistics, the composing models' too, between windows).

Before the statistics followed Triton's semantics it aborted with `Server side statistics compute counts must
be the same.` (compute input/output counted 0) and, on ensembles, found no statistics. Short count windows
keep the whole module near 30 s on a busy 2-core machine; `-s 1000` only loosens perf_analyzer's stability
rule (its windows must agree), which is about load noise, not about the server. Needs perf_analyzer
(tools/setup-perf-analyzer.sh, part of `make tools`); skipped without it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from bench.models import build_add_one, build_chain_repository
from bench.perf_analyzer import find_perf_analyzer, not_installed_reason, run_perf_analyzer
from tests.support.runtime_process import RuntimeProcess

_REASON = not_installed_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

WINDOWS = ["--measurement-mode", "count_windows", "--measurement-request-count", "40", "-s", "1000",
           "--concurrency-range", "2"]
MODES = [
    pytest.param("grpc", [], id="grpc-sync"),
    pytest.param("grpc", ["-a"], id="grpc-async"),
    pytest.param("grpc", ["--streaming"], id="grpc-streaming"),
    pytest.param("http", [], id="http-sync"),
    pytest.param("http", ["-a"], id="http-async"),
    pytest.param("grpc", ["--grpc-compression-algorithm", "gzip"], id="grpc-gzip"),
    pytest.param("grpc", ["--streaming", "--grpc-compression-algorithm", "deflate"], id="grpc-streaming-deflate"),
    pytest.param("grpc", ["--shared-memory", "system"], id="grpc-shm-system"),
    pytest.param("http", ["--shared-memory", "system"], id="http-shm-system"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root = tmp_path_factory.mktemp("repo")
    build_chain_repository(root, lengths=(2,))  # add_one_0 / add_one_1 (python) and chain2 = the two in a row
    build_add_one(root, "add_one_stream", decoupled=True)
    with RuntimeProcess([root]) as runtime:
        runtime.wait_ready(120)
        yield runtime


def _still_serves(server: RuntimeProcess) -> None:
    value = np.arange(16, dtype=np.float32)
    tensor = grpcclient.InferInput("IN", [16], "FP32")
    tensor.set_data_from_numpy(value)
    with server.grpc_client() as client:
        assert np.array_equal(client.infer("chain2", [tensor]).as_numpy("OUT"), value + 2)


@pytest.mark.parametrize(("protocol", "mode"), MODES)
@pytest.mark.parametrize("model", ["add_one_0", "chain2"])
def test_perf_analyzer_completes(server: RuntimeProcess, model: str, protocol: str, mode: list[str]) -> None:
    binary = find_perf_analyzer()
    assert binary is not None
    url = server.grpc_url if protocol == "grpc" else server.http_url
    measured = run_perf_analyzer(binary, model, url, ["-i", protocol, *mode, *WINDOWS])
    assert measured.returncode == 0, f"{' '.join(measured.command)}\n{measured.output[-3000:]}"
    assert "Throughput:" in measured.output
    assert measured.throughput > 0
    if model == "chain2":  # without -x it reports the composing models' statistics too
        assert "Composing models:" in measured.output
        assert "add_one_0, version: 1" in measured.output and "add_one_1, version: 1" in measured.output
    _still_serves(server)


def test_perf_analyzer_streams_from_a_decoupled_model(server: RuntimeProcess) -> None:
    """Decoupled: one response, then the final flag alone; perf_analyzer counts the response and reads the
    model's statistics."""
    binary = find_perf_analyzer()
    assert binary is not None
    measured = run_perf_analyzer(binary, "add_one_stream", server.grpc_url, ["-i", "grpc", "--streaming", *WINDOWS])
    assert measured.returncode == 0, f"{' '.join(measured.command)}\n{measured.output[-3000:]}"
    assert measured.throughput > 0
    _still_serves(server)


def test_perf_analyzer_binary_runs() -> None:
    """The wrapper tools/setup-perf-analyzer.sh wrote starts the binary through trixie's loader."""
    binary = find_perf_analyzer()
    assert binary is not None and Path(binary).name == "perf_analyzer"
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    assert "Perf Analyzer" in version.stdout + version.stderr
