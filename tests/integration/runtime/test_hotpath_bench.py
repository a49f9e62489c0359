"""bench/hotpath.py --micro at a tiny size, so the benchmark cannot rot: both of the data plane's paths run in
process for a python ensemble (its steps on their threads, or with `--inline` on the loop) and an ONNX model,
and `infer_then` (the path the native front ends take) takes every request for the python ensemble without a
task. The figures are the benchmark's business: only their presence is checked (an ONNX model's requests take
that path only while its executions are short, which a busy machine decides)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("inline", [False, True], ids=["threads", "inline"])
def test_hotpath_micro_measures_both_paths(tmp_path: Path, inline: bool) -> None:
    out = tmp_path / "hotpath.json"
    run = subprocess.run(
        [sys.executable, "bench/hotpath.py", "--micro", "--workload", "chain2", "--workload", "add_sub",
         "--count", "50", "--repeats", "1", "--json", str(out), *(["--inline"] if inline else [])],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["inline"] is inline
    results = payload["results"]
    assert set(results) == {"chain2@micro", "chain2@then", "add_sub@micro", "add_sub@then"}
    for case, per_server in results.items():
        row = per_server["this"]
        assert row["cpu_us_per_req"] > 0 and row["wall_us_per_req"] > 0, (case, row)
    assert results["chain2@then"]["this"]["without_task"] == 1.0


def test_call_count_counts_the_loop_and_the_model_threads(tmp_path: Path) -> None:
    """bench/call_count.py at a tiny size: a python ensemble's calls are counted on the loop and on each step's
    model thread (the hook reaches the threads the models start), with the most frequent calls named."""
    out = tmp_path / "call_count.json"
    run = subprocess.run(
        [sys.executable, "bench/call_count.py", "--workload", "chain2", "--count", "20", "--top", "3",
         "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    row = json.loads(out.read_text())["chain2"]["this"]
    threads = row["by_thread"]
    assert threads["MainThread"] > 0
    assert sorted(t for t in threads if t.startswith("py-")) == ["py-add_one_0_0_0", "py-add_one_1_0_0"]
    assert all(threads[t] > 0 for t in threads)
    assert abs(row["calls_per_request"] - sum(threads.values())) < 0.5  # each figure rounded on its own
    assert len(row["top"]) == 3


def test_tls_handshakes_measures_a_handshake_and_requests_beside_them(tmp_path: Path) -> None:
    """bench/tls_handshakes.py at a tiny size (an RSA key, the core on the loop): the server's CPU per handshake
    is measured (100 of them: the CPU's clock ticks are 10 ms) and the requests' latencies alone and beside a
    handshake load are there."""
    out = tmp_path / "tls_handshakes.json"
    run = subprocess.run(
        [sys.executable, "bench/tls_handshakes.py", "--key", "rsa", "--threads", "0", "--handshakes", "100",
         "--requests", "50", "--rate", "20", "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["key"], row["threads"]) == ("rsa", 0)
    assert row["server_cpu_us_per_handshake"] > 0
    for measured in (row["alone"], row["beside_20_handshakes_per_s"]):
        assert 0 < measured["p50_us"] <= measured["p99_us"], row
