"""Triton's response cache (`--cache-config local,size=N`, `response_cache { enable: true }`) against our runtime
and, side by side, the real Triton (where installed): the same requests answered, the same hits and misses in
the statistics and on /metrics, for a model asked directly and as a step of an ensemble that caches too.

Ours alone: the byte bound under many different requests, and a re-uploaded version never answered from what the
one before it cached.
"""

from __future__ import annotations

import queue
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.models import build_chain_repository
from bench.perf_analyzer import find_perf_analyzer, run_perf_analyzer
from bench.perf_analyzer import not_installed_reason as not_installed_reason_pa
from bench.triton_peer import TritonPeer, find_install, not_installed_reason
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ServerProcess

_NO_TRITON = not_installed_reason()
_TRITON = pytest.param("triton", marks=[pytest.mark.triton, pytest.mark.skipif(_NO_TRITON is not None,
                                                                               reason=_NO_TRITON or "")])
CACHE = "--cache-config=local,size=1048576"
ENABLE = "response_cache { enable: true }\n"
# (model, input, values): add_one_0 asked directly, then chain2 (add_one_0 -> add_one_1), both caching
LOAD = (("add_one_0", "X", (1.0, 1.0, 2.0, 1.0)), ("chain2", "IN", (1.0, 1.0, 2.0, 1.0, 3.0)))
COUNTS = ("success", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cache-repo")
    build_chain_repository(root, lengths=(2,))
    for model in ("add_one_0", "chain2"):
        with (root / model / "config.pbtxt").open("a") as config:
            config.write(ENABLE)
    return root


def _process(kind: str, repositories: list[Path], extra: list[str]) -> ServerProcess:
    if kind == "triton":
        install = find_install()
        assert install is not None
        caches = install.backend_directory.parent / "caches"
        return TritonPeer(repositories, [*extra, f"--cache-directory={caches}"], install=install)
    return RuntimeProcess(repositories, extra)


@pytest.fixture(scope="module", params=["ours", _TRITON])
def served(request: pytest.FixtureRequest, repository: Path) -> Iterator[dict[str, Any]]:
    """The load over gRPC and HTTP alternately; what came back, the statistics and the cache's metrics."""
    with _process(request.param, [repository], [CACHE]) as proc:
        proc.wait_ready()
        answers = []
        with proc.grpc_client() as grpc, proc.http_client() as http:
            for model, name, values in LOAD:
                for index, value in enumerate(values):
                    module: Any = grpcclient if index % 2 == 0 else httpclient
                    client: Any = grpc if index % 2 == 0 else http
                    item = module.InferInput(name, [16], "FP32")
                    item.set_data_from_numpy(np.full(16, value, np.float32))
                    answers.append(float(client.infer(model, [item]).as_numpy("OUT" if model == "chain2" else "Y")[0]))
            deadline = time.monotonic() + 30
            while True:  # tritonserver counts a request just after its answer has left
                stats = {e["name"]: e for e in grpc.get_inference_statistics(as_json=True)["model_stats"]}
                if int(stats["chain2"]["inference_stats"].get("success", {}).get("count", 0)) == 5:
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.1)
        while True:  # tritonserver refreshes its cache's gauges every 2 s (--metrics-interval-ms)
            with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as body:
                metrics = body.read().decode()
            if "\nnv_cache_num_lookups 12\n" in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        yield {"answers": answers, "stats": stats, "metrics": metrics}


def _counts(entry: dict[str, Any]) -> dict[str, int]:
    infer = entry["inference_stats"]
    return {"inference_count": int(entry.get("inference_count", 0)),
            "execution_count": int(entry.get("execution_count", 0)),
            **{k: int(infer.get(k, {}).get("count", 0)) for k in COUNTS}}


def _samples(text: str, prefix: str) -> dict[str, float]:
    return {m[0]: float(m[1]) for m in re.findall(rf"^({prefix}\S*) (\S+)$", text, re.MULTILINE)}


def test_hits_and_misses_count_as_tritonserver_counts_them(served: dict[str, Any]) -> None:
    assert served["answers"] == [2, 2, 3, 2, 3, 3, 4, 3, 5]  # add_one_0: +1; chain2: +2
    counts = {model: _counts(served["stats"][model]) for model in ("add_one_0", "add_one_1", "chain2")}
    # add_one_0: 4 direct requests (2 misses: values 1 and 2) and 3 chain2 steps (values 1, 2 hit; 3 misses);
    # a hit is a success with its queue time and no execution
    assert counts["add_one_0"] == {"inference_count": 3, "execution_count": 3, "success": 7, "queue": 7,
                                   "compute_input": 3, "compute_infer": 3, "compute_output": 3,
                                   "cache_hit": 4, "cache_miss": 3}
    assert counts["add_one_1"] == {"inference_count": 3, "execution_count": 3, "success": 3, "queue": 3,
                                   "compute_input": 3, "compute_infer": 3, "compute_output": 3,
                                   "cache_hit": 0, "cache_miss": 0}
    # chain2: 5 requests, 2 hits; the 3 it ran sum its steps' executions (add_one_0's hits ran nothing)
    assert counts["chain2"] == {"inference_count": 3, "execution_count": 3, "success": 5, "queue": 5,
                                "compute_input": 3, "compute_infer": 3, "compute_output": 3,
                                "cache_hit": 2, "cache_miss": 3}


def test_the_caches_metrics_as_tritonserver_writes_them(served: dict[str, Any]) -> None:
    text = served["metrics"]
    per_model = _samples(text, "nv_cache_num_")
    assert per_model['nv_cache_num_hits_per_model{model="add_one_0",version="1"}'] == 4
    assert per_model['nv_cache_num_misses_per_model{model="chain2",version="1"}'] == 3
    assert not any("add_one_1" in k for k in per_model)  # only the versions that cache
    assert {k: per_model[k] for k in ("nv_cache_num_hits", "nv_cache_num_misses", "nv_cache_num_lookups",
                                      "nv_cache_num_entries", "nv_cache_num_evictions")} == {
        "nv_cache_num_hits": 6, "nv_cache_num_misses": 6, "nv_cache_num_lookups": 12, "nv_cache_num_entries": 6,
        "nv_cache_num_evictions": 0}
    assert 0 < _samples(text, "nv_cache_util")["nv_cache_util"] < 1
    for name, kind in (("nv_cache_num_hits_per_model", "counter"), ("nv_cache_hit_duration_per_model", "counter"),
                       ("nv_cache_miss_duration_per_model", "counter"), ("nv_cache_lookup_duration", "gauge"),
                       ("nv_cache_insertion_duration", "gauge")):
        assert f"# TYPE {name} {kind}" in text.splitlines()


def _ask(proc: ServerProcess, model: str, value: float) -> float:
    with proc.grpc_client() as client:
        item = grpcclient.InferInput("X", [16], "FP32")
        item.set_data_from_numpy(np.full(16, value, np.float32))
        return float(client.infer(model, [item]).as_numpy("Y")[0])


def _stat(proc: ServerProcess, model: str, name: str) -> int:
    with proc.grpc_client() as client:
        entry = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(entry["inference_stats"].get(name, {}).get("count", 0))


def test_the_bound_holds_under_many_requests(repository: Path) -> None:
    with RuntimeProcess([repository], ["--cache-config=local,size=4096"]) as proc:
        proc.wait_model_ready("add_one_0")
        for value in range(40):  # each answer is 64 bytes of floats and its overhead: a few fit
            assert _ask(proc, "add_one_0", float(value)) == value + 1
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as body:
            gauges = _samples(body.read().decode(), "nv_cache_")
        assert 0 < gauges["nv_cache_util"] <= 1 and gauges["nv_cache_num_evictions"] > 0
        assert 0 < gauges["nv_cache_num_entries"] < 40
        assert _ask(proc, "add_one_0", 39.0) == 40 and _stat(proc, "add_one_0", "cache_hit") == 1  # the newest stays


def test_a_reuploaded_version_is_not_answered_from_the_old_ones_cache(repository: Path, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(repository / "add_one_0", root / "add_one_0")
    with RuntimeProcess([root], [CACHE, "--model-control-mode=explicit", "--load-model=add_one_0"]) as proc:
        proc.wait_model_ready("add_one_0")
        assert _ask(proc, "add_one_0", 1.0) == 2 and _ask(proc, "add_one_0", 1.0) == 2
        assert _stat(proc, "add_one_0", "cache_hit") == 1
        model = root / "add_one_0" / "1" / "model.py"
        model.write_text(model.read_text().replace("np.float32(1.0)", "np.float32(10.0)"))  # other content,
        assert "np.float32(10.0)" in model.read_text()  # the same version number
        with proc.grpc_client() as client:
            client.load_model("add_one_0")
        proc.wait_model_ready("add_one_0")
        assert _ask(proc, "add_one_0", 1.0) == 11


@pytest.mark.skipif(not_installed_reason_pa() is not None, reason=not_installed_reason_pa() or "")
def test_perf_analyzer_reads_the_hits(repository: Path) -> None:
    """NVIDIA's perf_analyzer, unchanged, on a caching ensemble with the same input every time: it completes and
    reports the hits from the statistics (`Cache hit count`)."""
    binary = find_perf_analyzer()
    assert binary is not None
    with RuntimeProcess([repository], [CACHE]) as proc:
        proc.wait_ready()
        measured = run_perf_analyzer(binary, "chain2", proc.grpc_url, [
            "-i", "grpc", "--input-data", "zero", "--measurement-mode", "count_windows",
            "--measurement-request-count", "40", "-s", "1000", "--concurrency-range", "2"])
    assert measured.returncode == 0, f"{' '.join(measured.command)}\n{measured.output[-3000:]}"
    hits = re.search(r"Server: .*?Cache hit count: (\d+)\s+Cache miss count: (\d+)", measured.output, re.DOTALL)
    assert hits is not None, measured.output[-3000:]
    # the one input is missed by at most the 2 first in flight (perf_analyzer counts its windows only: the misses
    # may fall in its warm-up), then every request hits
    assert int(hits[1]) > 0 and int(hits[2]) <= 2


@pytest.mark.parametrize("kind", ["ours", _TRITON])
def test_an_ensemble_that_caches_over_steps_that_do_not(kind: str, tmp_path: Path) -> None:
    """Only the ensemble caches (ours answers its hits without a task, as the request arrives): a hit runs no
    step; the steps count only the misses' executions."""
    root = tmp_path / "repo"
    build_chain_repository(root, lengths=(2,))
    with (root / "chain2" / "config.pbtxt").open("a") as config:
        config.write(ENABLE)
    with _process(kind, [root], [CACHE]) as proc:
        proc.wait_ready()
        with proc.grpc_client() as client:
            for value in (5.0, 5.0, 6.0, 5.0, 6.0):
                item = grpcclient.InferInput("IN", [16], "FP32")
                item.set_data_from_numpy(np.full(16, value, np.float32))
                result = client.infer("chain2", [item])
                assert float(result.as_numpy("OUT")[0]) == value + 2
            deadline = time.monotonic() + 30
            while True:
                stats = {e["name"]: _counts(e) for e in client.get_inference_statistics(as_json=True)["model_stats"]}
                if stats["chain2"]["success"] == 5 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
    assert stats["chain2"] == {"inference_count": 2, "execution_count": 2, "success": 5, "queue": 5,
                               "compute_input": 2, "compute_infer": 2, "compute_output": 2,
                               "cache_hit": 3, "cache_miss": 2}
    assert stats["add_one_0"]["success"] == stats["add_one_1"]["execution_count"] == 2


def test_failures_are_not_cached(tmp_path: Path) -> None:
    """`guarded` (add_one_0 -> refuse_negative, which answers an error below -1), every model and the ensemble
    caching: a refused request fails each time it is sent, and only answers are cached."""
    from tests.integration.triton_peer.stats_repository import build_stats_repository

    root = tmp_path / "repo"
    build_stats_repository(root)
    for model in ("add_one_0", "refuse_negative", "guarded"):
        with (root / model / "config.pbtxt").open("a") as config:
            config.write(ENABLE)
    with RuntimeProcess([root], [CACHE]) as proc:
        proc.wait_ready()
        with proc.grpc_client() as client:
            for value in (-5.0, -5.0, 0.0, 0.0):
                item = grpcclient.InferInput("IN", [16], "FP32")
                item.set_data_from_numpy(np.full(16, value, np.float32))
                if value < 0:
                    with pytest.raises(InferenceServerException, match="negative input"):
                        client.infer("guarded", [item])
                else:
                    assert float(client.infer("guarded", [item]).as_numpy("OUT")[0]) == 1.0
            deadline = time.monotonic() + 30
            while True:
                stats = {e["name"]: e for e in client.get_inference_statistics(as_json=True)["model_stats"]}
                if int(stats["guarded"]["inference_stats"].get("success", {}).get("count", 0)) == 2:
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.1)
    guarded = stats["guarded"]["inference_stats"]
    assert int(guarded["fail"]["count"]) == 2 and int(guarded["cache_hit"]["count"]) == 1
    assert int(guarded["cache_miss"]["count"]) == 1  # only the answer was stored
    # refuse_negative answered its error response twice (its own success: it ran), and ran once for 0.0
    assert int(stats["refuse_negative"]["execution_count"]) == 3


@pytest.mark.parametrize("kind", ["ours", _TRITON])
def test_a_stream_asks_the_cache_too(kind: str, repository: Path) -> None:
    """ModelStreamInfer to a model that is not decoupled: three requests one after the other, the same input:
    one miss, then two hits, counted alike by both servers. (tritonserver 2.51's answer to the miss reaches
    tritonclient malformed: "response output count mismatch"; its hits are whole. Ours answers all three.)"""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    errors = []
    with _process(kind, [repository], [CACHE]) as proc:
        proc.wait_ready()
        with proc.grpc_client() as client:
            client.start_stream(callback=lambda result, error: answers.put((result, error)))
            for _ in range(3):
                item = grpcclient.InferInput("X", [16], "FP32")
                item.set_data_from_numpy(np.full(16, 41.0, np.float32))
                client.async_stream_infer("add_one_0", [item])
                result, error = answers.get(timeout=30)
                if error is not None:
                    errors.append(str(error))
                else:
                    assert float(result.as_numpy("Y")[0]) == 42.0
            client.stop_stream()
            deadline = time.monotonic() + 30
            while (hits := _stat(proc, "add_one_0", "cache_hit")) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert (hits, _stat(proc, "add_one_0", "cache_miss")) == (2, 1)
    assert errors == [] if kind == "ours" else errors in ([], ["response output count mismatch"])
