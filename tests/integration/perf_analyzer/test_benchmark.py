"""bench/perf_analyzer.py end to end at its smallest (one model, one concurrency, 0.5 s windows, two
configurations of ours, without the Triton peer, `-s 1000` so load noise cannot fail it): the JSON has gRPC and
HTTP, server CPU per 1,000 requests and the ONNX overhead point for each configuration, and the floor server
(`--floor`, and `--floor-in-core`) over gRPC only. A check that the benchmark runs, not of its figures (~35 s)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.pa.servers import OursConfig, choose_pinning, ours_configs
from bench.perf_analyzer import main, not_installed_reason
from bench.triton_peer import not_installed_reason as peer_not_installed_reason

_REASON = not_installed_reason()


def test_ours_configurations_parse() -> None:
    assert ours_configs([], ["--x=1"]) == [OursConfig("ours", ("--x=1",))]
    assert ours_configs(["a=", "b=--flag=v --other"], ["--x=1"]) == [
        OursConfig("a", ("--x=1",)), OursConfig("b", ("--x=1", "--flag=v", "--other"))]
    with pytest.raises(ValueError):
        ours_configs(["triton=--x"], [])
    with pytest.raises(ValueError):
        ours_configs(["a=", "a=--x"], [])
    runtime = Path(__file__).resolve().parents[3] / "runtime"
    assert ours_configs([f"base@{runtime}=--y"], []) == [OursConfig("base", ("--y",), runtime)]
    with pytest.raises(ValueError):  # a directory with no runtime package in it
        ours_configs([f"base@{runtime / 'native'}="], [])


def test_pinning_defaults_to_two_cpus() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    pinning = choose_pinning(None)
    assert choose_pinning(False).server_prefix() == []
    if len(cpus) >= 2:
        assert pinning.server_prefix() == ["taskset", "-c", str(cpus[0])]
        assert pinning.client_prefix() == ["taskset", "-c", str(cpus[1])]
    else:
        assert pinning.server is None and pinning.client is None


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
def test_quick_run_reports_http_cpu_threads_onnx_and_floors(tmp_path: Path) -> None:
    out = tmp_path / "perf_analyzer.json"
    assert main(["--quick", "--interval-ms", "500", "--stability", "1000", "--no-triton", "--model", "add_one_0", "--concurrency", "2",
                 "--ours", "a=", "--ours", "b=--allow-metrics=false", "--threads", "--floor", "--floor-in-core", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ours"] == {"a": [], "b": ["--allow-metrics=false"]}
    for protocol in ("grpc", "http"):
        point = report["results"]["add_one_0"][protocol]["2"]
        onnx = report["onnx"][protocol]
        assert onnx["onnxruntime"]["runs_ok"] == 1 and onnx["onnxruntime"]["p50_us"] > 0
        for name in ("a", "b"):
            assert point[name]["runs_ok"] == 1, point[name]["errors"]
            assert point[name]["throughput_rps"] > 0 and point[name]["cpu_ms_per_1000"] > 0
            assert point[name]["cpu_runs"] == 1
            assert point[name]["samples"][0]["server_requests"] > 0
            main_thread = [t for t in point[name]["samples"][0]["threads"] if t["thread"] == "main"]
            assert len(main_thread) == 1 and main_thread[0]["user_us"] + main_thread[0]["system_us"] > 0
            assert onnx[name]["runs_ok"] == 1, onnx[name]["errors"]
            assert onnx["overhead_us"][name] == pytest.approx(onnx[name]["p50_us"] - onnx["onnxruntime"]["p50_us"],
                                                                abs=0.2)
    # the floor: perf_analyzer ran against it over gRPC (its metadata, config and statistics answers were enough)
    # and the requests it counted are what the CPU figure is divided by; never over HTTP, which it does not serve
    # (the floor in the core: the requests its core answered without Python are the ones it counts)
    for name in ("floor", "floor-core"):
        floor = report["results"]["add_one_0"]["grpc"]["2"][name]
        assert floor["runs_ok"] == 1, floor["errors"]
        assert floor["samples"][0]["server_requests"] > 0 and floor["cpu_ms_per_1000"] > 0
        assert name not in report["results"]["add_one_0"]["http"]["2"]
        assert report["onnx"]["grpc"][name]["runs_ok"] == 1 and name not in report["onnx"]["http"]


_PEER_REASON = _REASON or peer_not_installed_reason()


@pytest.mark.triton
@pytest.mark.skipif(_PEER_REASON is not None, reason=_PEER_REASON or "")
def test_perf_analyzer_measures_ours_and_triton_over_tls(tmp_path: Path) -> None:
    """`--tls`: both servers serve gRPC over TLS with the same flags (Triton's), and NVIDIA's client reaches both
    with its --ssl-grpc-* options; the harness's own statistics calls go over TLS too."""
    out = tmp_path / "perf_analyzer.json"
    assert main(["--quick", "--interval-ms", "500", "--stability", "1000", "--model", "add_one_0", "--protocol", "grpc",
                 "--concurrency", "1", "--no-onnx", "--tls", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["tls"] is True and "--grpc-use-ssl=true" in report["ours"]["ours"]
    point = report["results"]["add_one_0"]["grpc"]["1"]
    assert "--ssl-grpc-use-ssl true" in point["command"]
    for name in ("ours", "triton"):
        assert point[name]["runs_ok"] == 1, point[name]["errors"]
        assert point[name]["samples"][0]["server_requests"] > 0
