"""Per-request CPU cost of the runtime's hot path, A/B between source trees or flag sets, in one run.

    python bench/hotpath.py                                        # this tree only
    git worktree add /tmp/base HEAD~3
    python bench/hotpath.py --server base=/tmp/base/runtime --server new=runtime
    python bench/hotpath.py --server a=runtime --server b=runtime:--some-flag=x

Each `--server NAME=RUNTIME_DIR[:FLAG...]` starts one runtime process from that `runtime/` directory (with
those extra flags); all of them serve the same repository (`chain2` and `chain4` python ensembles of
`add_one` steps, and `add_sub`, a small ONNX model) for the whole run. For each workload and each
concurrency the servers are measured in turn, alternating, `--repeats` times; the figures are medians.

Reported per server: p50/p99 latency and throughput from the client, and **server CPU microseconds per
request** (user + system time of the server process over the run, from /proc, divided by the requests it
completed): the cost of the hot path with the client's own CPU left out, which is the least noisy figure on a
shared machine. At 1 in flight the synchronous `tritonclient.grpc` client is used (the cheapest caller), at
higher concurrency the asyncio client. Ratios are against the first server. Writes bench/results/hotpath.json
(hotpath_micro.json with --micro).

`--micro` measures the same path without gRPC: one process per `--server` tree builds the data plane
in-process and times decode_request -> DataPlane.infer -> encode_response on prebuilt protobuf requests,
serially on uvloop; reported as process CPU microseconds per request (all threads), alternating trees
(`<model>@micro`). The same process then times decode_request -> DataPlane.infer_then, the path without a task
that the native front ends take, with the answer handed back to the loop (`<model>@then`; the core's own decoding
and encoding are not in it). Where `infer_then` does not take a request (an ONNX model whose executions are not
short enough to run on the loop) it goes to `DataPlane.infer`, as in the front ends; `without_task` is the share
of requests `infer_then` took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from bench.common import summarize, write_json
from bench.models import build_chain_repository, mark_inline
from tests.support.runtime_process import REPO_ROOT, RuntimeProcess

ADD_SUB = """
name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
TICKS = os.sysconf("SC_CLK_TCK")


def _inputs(model: str) -> list[grpcclient.InferInput]:
    arrays: dict[str, npt.NDArray[np.float32]]
    if model == "add_sub":
        arrays = {"INPUT0": np.ones((1, 16), np.float32), "INPUT1": np.ones((1, 16), np.float32)}
    else:
        arrays = {"IN": np.zeros(16, np.float32)}
    out = []
    for name, array in arrays.items():
        item = grpcclient.InferInput(name, list(array.shape), "FP32")
        item.set_data_from_numpy(array)
        out.append(item)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def serial(proc: RuntimeProcess, model: str, duration: float) -> dict[str, float]:
    assert proc.proc is not None
    inputs = _inputs(model)
    latencies: list[float] = []
    with grpcclient.InferenceServerClient(proc.grpc_url) as client:
        for _ in range(100):
            client.infer(model, inputs)
        cpu = cpu_seconds(proc.proc.pid)
        stop_at = time.perf_counter() + duration
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            client.infer(model, inputs)
            latencies.append(time.perf_counter() - t0)
        cpu = cpu_seconds(proc.proc.pid) - cpu
    return _with_cpu(summarize(latencies, duration), cpu)


def concurrent(proc: RuntimeProcess, model: str, inflight: int, duration: float) -> dict[str, float]:
    """Closed loop, `inflight` workers; server CPU counted over the requests that both started and ended
    inside the window (the few straddling its edges make the figure slightly high, equally for all)."""
    assert proc.proc is not None
    pid = proc.proc.pid

    async def run() -> dict[str, float]:
        client = aioclient.InferenceServerClient(proc.grpc_url)
        inputs = _inputs(model)
        latencies: list[float] = []
        window: list[float] = []

        async def worker(stop_at: float, record: bool) -> None:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                await client.infer(model, inputs)
                if record:
                    latencies.append(time.perf_counter() - t0)

        try:
            await asyncio.gather(*(worker(time.perf_counter() + 0.3, False) for _ in range(inflight)))
            window.append(cpu_seconds(pid))
            await asyncio.gather(*(worker(time.perf_counter() + duration, True) for _ in range(inflight)))
            window.append(cpu_seconds(pid))
        finally:
            await client.close()
        return _with_cpu(summarize(latencies, duration), window[1] - window[0])

    return asyncio.run(run())


def _with_cpu(row: dict[str, float], cpu_s: float) -> dict[str, float]:
    row["server_cpu_us_per_req"] = round(cpu_s * 1e6 / max(1, row["requests"]), 1)
    return row


def infer_request(model: str) -> Any:
    """A prebuilt `ModelInferRequest` for `model` (its inputs as the repository names them)."""
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    for item in _inputs(model):
        tensor = item._get_tensor()
        if model.startswith("add_one"):  # a chain's step on its own
            tensor.name = "X"
        request.inputs.append(tensor)
        request.raw_input_contents.append(item._get_content())
    return request


def then_or_infer(dataplane: Any, request: Any) -> Callable[[], Awaitable[bool]]:
    """One request as the native front ends send it: decoded, then `DataPlane.infer_then` where it takes it (True),
    else `DataPlane.infer` (False). Call on the loop."""
    from ensemble_runtime.protocol import grpc_codec

    loop = asyncio.get_running_loop()

    async def one() -> bool:
        decoded, declared = grpc_codec.decode_request(request)
        answered: asyncio.Future[object] = loop.create_future()

        def answer(outcome: object) -> None:  # on the thread that ran the request
            loop.call_soon_threadsafe(answered.set_result, outcome)

        if not dataplane.infer_then(decoded, declared, answer):
            await dataplane.infer(decoded, declared)
            return False
        if isinstance(outcome := await answered, Exception):
            raise outcome
        return True

    return one


def micro_child(root: Path, model: str, count: int) -> None:
    """In-process: CPU and wall microseconds per request of codec + data plane, serially on uvloop, on each of the
    data plane's two paths: `DataPlane.infer` (one task per request) and `DataPlane.infer_then` (no task: the path
    the native front ends take; the core decodes and encodes there, so here only `decode_request` stands in)."""
    import uvloop
    from ensemble_runtime.protocol import grpc_codec
    from ensemble_runtime.server import build_dataplane, default_backends
    from ensemble_runtime.settings import parse_settings

    request = infer_request(model)

    async def run() -> None:
        dataplane = build_dataplane(parse_settings([f"--model-repository={root}"]), default_backends())
        await dataplane.manager.load([model])
        without_task = then_or_infer(dataplane, request)

        async def with_task() -> bool:
            decoded, declared = grpc_codec.decode_request(request)
            grpc_codec.encode_response(await dataplane.infer(decoded, declared)).SerializeToString()
            return True

        async def timed(one: Callable[[], Awaitable[bool]]) -> dict[str, float]:
            """500 warm-up requests, then `count` timed; `taken`: the share for which `one` returned True."""
            for _ in range(500):
                await one()
            taken, cpu, wall = 0, time.process_time(), time.perf_counter()
            for _ in range(count):
                taken += await one()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            return {"cpu_us_per_req": round(cpu * 1e6 / count, 1), "wall_us_per_req": round(wall * 1e6 / count, 1),
                    "taken": taken / count}

        measured = {"task": await timed(with_task), "then": await timed(without_task)}
        print(json.dumps(measured), flush=True)
        await dataplane.manager.unload(model)

    uvloop.run(run())


def micro(servers: list[tuple[str, Path, list[str]]], root: Path, workloads: list[str], count: int,
          repeats: int) -> dict[str, Any]:
    import subprocess

    results: dict[str, Any] = {}
    for model in workloads:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in servers}
        then_runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in servers}
        for _ in range(repeats):
            for name, runtime_dir, _ in servers:
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "contract"), str(runtime_dir), str(REPO_ROOT / "examples"),
                                                                     str(REPO_ROOT)])}
                out = subprocess.run(
                    [sys.executable, __file__, "--micro-child", str(root), model, str(count)],
                    env=env, check=True, capture_output=True, text=True,
                ).stdout
                measured = json.loads(out.strip().splitlines()[-1])
                task, then = measured["task"], measured["then"]
                runs[name].append({"cpu_us_per_req": task["cpu_us_per_req"], "wall_us_per_req": task["wall_us_per_req"]})
                then_runs[name].append({"cpu_us_per_req": then["cpu_us_per_req"],
                                        "wall_us_per_req": then["wall_us_per_req"], "without_task": then["taken"]})
        results[f"{model}@micro"] = {name: _median(rows) for name, rows in runs.items()}
        results[f"{model}@then"] = {name: _median(rows) for name, rows in then_runs.items()}
    return results


def served(servers: list[tuple[str, Path, list[str]]], root: Path, workloads: list[str], levels: list[int],
           duration: float, repeats: int) -> dict[str, Any]:
    procs: dict[str, RuntimeProcess] = {}
    results: dict[str, Any] = {}
    try:
        for name, runtime_dir, flags in servers:
            proc = RuntimeProcess([root], ["--allow-http=false", "--allow-metrics=false", *flags])
            proc.env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "contract"), str(runtime_dir), str(REPO_ROOT / "examples")])
            procs[name] = proc.start()
        for proc in procs.values():
            for model in workloads:
                proc.wait_model_ready(model)
        for model in workloads:
            for inflight in levels:
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in procs}
                for _ in range(repeats):
                    for name, proc in procs.items():
                        if inflight == 1:
                            runs[name].append(serial(proc, model, duration))
                        else:
                            runs[name].append(concurrent(proc, model, inflight, duration))
                results[f"{model}@{inflight}"] = {name: _median(rows) for name, rows in runs.items()}
    finally:
        for proc in procs.values():
            proc.stop()
    return results


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}


def parse_server(text: str) -> tuple[str, Path, list[str]]:
    name, _, rest = text.partition("=")
    runtime_dir, *flags = rest.split(":")
    return name, Path(runtime_dir).resolve(), flags


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", action="append", default=[], help="NAME=RUNTIME_DIR[:FLAG...] (repeatable)")
    parser.add_argument("--workload", action="append", default=[], help="chain2, chain4, add_sub (default: all)")
    parser.add_argument("--concurrency", type=int, action="append", default=[], help="default: 1 and 16")
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--micro", action="store_true", help="in-process codec + data plane, no gRPC")
    parser.add_argument("--count", type=int, default=5000, help="requests per --micro run")
    parser.add_argument("--inline", action="store_true", help="the python steps with EXECUTE_INLINE (on the loop)")
    parser.add_argument("--json", type=Path, help="write here instead of bench/results/hotpath[_micro].json")
    parser.add_argument("--micro-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.micro_child:
        micro_child(Path(args.micro_child[0]), args.micro_child[1], int(args.micro_child[2]))
        return 0
    servers = [parse_server(s) for s in args.server] or [("this", REPO_ROOT / "runtime", [])]
    workloads = args.workload or ["chain2", "chain4", "add_sub"]
    levels = args.concurrency or [1, 16]
    from ensemble_examples import onnx_models

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_chain_repository(root)
        (root / "add_sub" / "1").mkdir(parents=True)
        (root / "add_sub" / "config.pbtxt").write_text(ADD_SUB)
        onnx_models.save(onnx_models.add_sub(), root / "add_sub" / "1" / "model.onnx")
        if args.inline:
            mark_inline(root)
        if args.micro:
            results = micro(servers, root, workloads, args.count, args.repeats)
            keys: tuple[str, ...] = ("cpu_us_per_req", "wall_us_per_req")
        else:
            results = served(servers, root, workloads, levels, args.duration, args.repeats)
            keys = ("p50_us", "p99_us", "throughput_rps", "server_cpu_us_per_req")
    first = servers[0][0]
    print(f"{'case':<16}{'server':<10}" + "".join(f"{k:>24}" for k in keys))
    for case, per_server in results.items():
        for name, row in per_server.items():
            cells = []
            for k in keys:
                ratio = row[k] / per_server[first][k] if per_server[first][k] else float("nan")
                cells.append(f"{row[k]:>14}" + (f" ({ratio:5.2f}x)" if name != first else " " * 9))
            print(f"{case:<16}{name:<10}" + "".join(f"{c:>24}" for c in cells))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    payload = {"servers": {n: {"runtime": str(d), "flags": f} for n, d, f in servers}, "results": results,
               "duration_s": args.duration, "repeats": args.repeats, "inline": args.inline, "load_average": load}
    print(f"wrote {write_json('hotpath_micro' if args.micro else 'hotpath', payload, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
