"""Our runtime against the real Triton, side by side: same repository, same machine, same load generator.

    tools/setup-triton.sh                  # once: installs the peer (nvidia-pytriton's tritonserver)
    python bench/triton_compare.py [--duration S] [--repeats N] [--quick]

Both servers serve one repository (bench/models: `chain2`/`chain4`, python ensembles of `add_one` steps on
FP32 [16]; and the `text_pipeline` example, tokenizer -> text_scorer -> threshold, BYTES in). The peer's
tritonserver has only the python backend, so `text_scorer` is the equivalent python model in BOTH (see
bench/models/text_scorer.py). Both servers stay up for the whole run; for each workload and concurrency
(1, 16, 64 in flight, tritonclient.grpc.aio closed loop) the runs alternate ours, Triton, ours, Triton...,
and each figure is the median over the repeats. Per-step scheduling overhead comes from each server's own
ModelStatistics over the serial runs: (ensemble request duration - sum of the steps' compute durations) /
steps; "frontend" is the client's mean latency minus the server's ensemble duration (protocol, transport). RSS is VmRSS summed over each server's process tree (Triton's python stubs are child processes).
Prints a table and writes bench/results/triton_compare.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

if __package__ in (None, ""):  # run as a script: make `bench` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from bench.common import closed_loop, write_json
from bench.models import build_chain_repository, build_text_repository, chain_name, mark_inline, step_name
from bench.triton_peer import TritonPeer, require_install
from tests.support.runtime_process import RuntimeProcess

CONCURRENCY = (1, 16, 64)
TARGETS = {"serial_p50_ratio_max": 0.6, "throughput_16_ratio_min": 1.0, "overhead_us_per_step_max": 25.0}
TEXT = "the quick brown fox jumps over the lazy dog"
SERVERS = ("ours", "triton")
Stats = dict[str, dict[str, tuple[int, int]]]  # model -> stat name -> (count, ns)


class Server(Protocol):
    @property
    def grpc_url(self) -> str: ...


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    steps: tuple[str, ...]
    inputs: Callable[[], list[grpcclient.InferInput]]
    check: Callable[[grpcclient.InferResult], bool]


def _tensor(name: str, value: np.ndarray[Any, Any], dtype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(value.shape), dtype)
    tensor.set_data_from_numpy(value)
    return tensor


def chain_workload(length: int) -> Workload:
    def inputs() -> list[grpcclient.InferInput]:
        return [_tensor("IN", np.arange(16, dtype=np.float32), "FP32")]

    def check(result: grpcclient.InferResult) -> bool:
        return bool(np.array_equal(result.as_numpy("OUT"), np.arange(16, dtype=np.float32) + length))

    steps = tuple(step_name(i) for i in range(length))
    return Workload(chain_name(length), chain_name(length), steps, inputs, check)


def text_workload() -> Workload:
    def inputs() -> list[grpcclient.InferInput]:
        return [_tensor("text", np.array([[TEXT.encode()]], dtype=np.object_), "BYTES"),
                _tensor("threshold", np.array([[0.5]], dtype=np.float32), "FP32")]

    def check(result: grpcclient.InferResult) -> bool:
        probability = result.as_numpy("probability")
        return probability is not None and probability.shape == (1, 1) and 0.0 < float(probability[0, 0]) < 1.0

    return Workload("text_pipeline", "text_pipeline", ("tokenizer", "text_scorer", "threshold"), inputs, check)


def process_tree_rss_bytes(root_pid: int) -> int:
    """VmRSS of `root_pid` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the parenthesised command name
        children.setdefault(ppid, []).append(int(entry.name))
    total, pending = 0, [root_pid]
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


async def snapshot(client: aioclient.InferenceServerClient, models: Sequence[str]) -> Stats:
    """Cumulative (count, ns) per statistic, summed over versions, for each model."""
    out: Stats = {}
    for model in models:
        reply = await client.get_inference_statistics(model_name=model, as_json=True)
        totals: dict[str, tuple[int, int]] = {}
        for version in reply.get("model_stats", []):
            for key, value in version.get("inference_stats", {}).items():
                count, ns = totals.get(key, (0, 0))
                totals[key] = (count + int(value.get("count", 0)), ns + int(value.get("ns", 0)))
        out[model] = totals
    return out


def overhead(before: Stats, after: Stats, workload: Workload) -> dict[str, float]:
    """Per-request means over the interval: ensemble duration, step compute and queue, and their gap per step."""

    def delta(model: str, key: str) -> tuple[int, int]:
        c0, n0 = before[model].get(key, (0, 0))
        c1, n1 = after[model].get(key, (0, 0))
        return c1 - c0, n1 - n0

    def mean_us(model: str, key: str) -> float:
        count, ns = delta(model, key)
        return ns / count / 1e3 if count else 0.0

    ensemble_us = mean_us(workload.model, "success")
    compute_us = sum(mean_us(s, k) for s in workload.steps for k in ("compute_input", "compute_infer", "compute_output"))
    queue_us = sum(mean_us(s, "queue") for s in workload.steps)
    steps = len(workload.steps)
    return {
        "requests": delta(workload.model, "success")[0],
        "ensemble_us": round(ensemble_us, 1),
        "step_compute_us": round(compute_us, 1),
        "step_queue_us": round(queue_us, 1),
        "overhead_us_per_step": round((ensemble_us - compute_us) / steps, 1),
    }


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(row[key] for row in rows), 1) for key in rows[0]}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


async def run_workload(workload: Workload, clients: dict[str, aioclient.InferenceServerClient],
                       concurrency: Sequence[int], duration: float, repeats: int) -> dict[str, Any]:
    inputs = workload.inputs()
    for server, client in clients.items():  # both must compute the right answer before anything is timed
        reply = await client.infer(workload.model, inputs)
        if not workload.check(reply):
            raise AssertionError(f"{server}: wrong output from {workload.model}: {reply.get_response()}")
    models = [workload.model, *workload.steps]
    levels: dict[str, Any] = {}
    overheads: dict[str, list[dict[str, float]]] = {s: [] for s in SERVERS}
    for inflight in concurrency:
        runs: dict[str, list[dict[str, float]]] = {s: [] for s in SERVERS}
        for _ in range(repeats):
            for server in SERVERS:  # alternate: ours, triton, ours, triton...
                client = clients[server]

                async def call(client: aioclient.InferenceServerClient = client) -> object:
                    return await client.infer(workload.model, inputs)

                before = await snapshot(client, models)
                runs[server].append(await closed_loop(call, inflight, duration))
                if inflight == 1:
                    overheads[server].append(overhead(before, await snapshot(client, models), workload))
        ours, triton = _median(runs["ours"]), _median(runs["triton"])
        levels[str(inflight)] = {
            "ours": ours, "triton": triton, "runs": runs,
            "ratio": {k: _ratio(ours[k], triton[k]) for k in ("p50_us", "p99_us", "throughput_rps")},
        }
    result: dict[str, Any] = {"steps": len(workload.steps), "concurrency": levels}
    if overheads["ours"]:
        result["overhead"] = {s: _median(overheads[s]) for s in SERVERS}
        for server, row in result["overhead"].items():  # client-seen time outside the ensemble: the frontend
            row["frontend_us"] = round(levels["1"][server]["mean_us"] - row["ensemble_us"], 1)
    return result


async def measure(servers: dict[str, Server], workloads: Sequence[Workload], concurrency: Sequence[int],
                  duration: float, repeats: int) -> dict[str, Any]:
    clients = {name: aioclient.InferenceServerClient(server.grpc_url) for name, server in servers.items()}
    try:
        return {w.name: await run_workload(w, clients, concurrency, duration, repeats) for w in workloads}
    finally:
        for client in clients.values():
            await client.close()


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for name, result in results.items():
        levels = result["concurrency"]
        if "1" in levels:
            value = levels["1"]["ratio"]["p50_us"]
            checks.append({"workload": name, "target": "serial p50 ours/Triton <= 0.6", "value": value,
                           "met": value <= TARGETS["serial_p50_ratio_max"]})
        if "16" in levels:
            value = levels["16"]["ratio"]["throughput_rps"]
            checks.append({"workload": name, "target": "throughput@16 ours/Triton >= 1.0", "value": value,
                           "met": value >= TARGETS["throughput_16_ratio_min"]})
        if "overhead" in result:
            value = result["overhead"]["ours"]["overhead_us_per_step"]
            checks.append({"workload": name, "target": "our scheduler overhead <= 25 us/step", "value": value,
                           "met": value <= TARGETS["overhead_us_per_step_max"]})
    return checks


def print_report(report: dict[str, Any]) -> None:
    head = (f"{'workload':<14} {'in-flight':>9} {'p50 ours':>9} {'p50 trt':>9} {'ratio':>6} {'p99 ours':>9} "
            f"{'p99 trt':>9} {'ratio':>6} {'rps ours':>9} {'rps trt':>9} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    for name, result in report["results"].items():
        for inflight, level in result["concurrency"].items():
            o, t, r = level["ours"], level["triton"], level["ratio"]
            print(f"{name:<14} {inflight:>9} {o['p50_us']:>9} {t['p50_us']:>9} {r['p50_us']:>6} {o['p99_us']:>9} "
                  f"{t['p99_us']:>9} {r['p99_us']:>6} {o['throughput_rps']:>9} {t['throughput_rps']:>9} "
                  f"{r['throughput_rps']:>6}")
    print("\nserial runs, server-side (ModelStatistics), us per request:")
    print(f"{'workload':<14} {'server':<7} {'ensemble':>9} {'step compute':>13} {'step queue':>11} "
          f"{'overhead/step':>14} {'frontend':>9}")
    for name, result in report["results"].items():
        for server, row in result.get("overhead", {}).items():
            print(f"{name:<14} {server:<7} {row['ensemble_us']:>9} {row['step_compute_us']:>13} "
                  f"{row['step_queue_us']:>11} {row['overhead_us_per_step']:>14} {row['frontend_us']:>9}")
    print("\nRSS (MiB, process tree):", ", ".join(
        f"{server} {phase} {value}" for server, phases in report["rss_mib"].items() for phase, value in phases.items()))
    print("\ntargets:")
    for check in report["targets"]:
        print(f"  {'MET ' if check['met'] else 'MISS'} {check['workload']:<14} {check['target']:<40} {check['value']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per run (default 5)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating ours/Triton pairs per point (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 s runs, one pair per point (a smoke run)")
    parser.add_argument("--inline", action="store_true",
                        help="set EXECUTE_INLINE on the Python models (ours runs them on the event loop; Triton ignores it)")
    args = parser.parse_args(argv)
    duration, repeats = (1.0, 1) if args.quick else (args.duration, args.repeats)
    install = require_install()
    python_scorer = "onnxruntime" not in install.backends
    workloads = [chain_workload(2), chain_workload(4), text_workload()]
    with tempfile.TemporaryDirectory(prefix="triton-compare-") as tmp:
        repository = Path(tmp) / "models"
        build_chain_repository(repository)
        build_text_repository(repository, python_scorer=python_scorer)
        if args.inline:
            mark_inline(repository)
        with RuntimeProcess([repository]) as ours, TritonPeer([repository], install=install) as triton:
            ours.wait_ready(120)
            triton.wait_ready(120)
            assert ours.proc is not None
            pids = {"ours": ours.proc.pid, "triton": triton.pid}
            time.sleep(1.0)  # let both settle after loading before the idle reading
            rss = {s: {"idle": round(process_tree_rss_bytes(pid) / 2**20, 1)} for s, pid in pids.items()}
            servers: dict[str, Server] = {"ours": ours, "triton": triton}
            results = asyncio.run(measure(servers, workloads, CONCURRENCY, duration, repeats))
            for server, pid in pids.items():
                rss[server]["after_load"] = round(process_tree_rss_bytes(pid) / 2**20, 1)
    report: dict[str, Any] = {
        "python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
        "triton": {"pytriton": install.pytriton_version, "backends": list(install.backends),
                   "text_scorer": "python (no onnxruntime backend in the peer)" if python_scorer else "onnx"},
        "duration_s": duration, "repeats": repeats, "concurrency": list(CONCURRENCY),
        "results": results, "rss_mib": rss, "execute_inline": args.inline,
    }
    report["targets"] = targets(results)
    print_report(report)
    print(f"\nwrote {write_json('triton_compare_inline' if args.inline else 'triton_compare', report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
