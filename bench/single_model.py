"""Issue 2 benchmark: one small ONNX model, batch 1, served vs onnxruntime called directly, same run.

Prints p50/p99 at 1 and 16 in flight and writes bench/results/single_model.json.
Overhead = served p50 - direct p50 at 1 in flight (target <= 150 us). The floor is `bench.pa.floor`: our own
native gRPC core and one wake-up of the event loop per call, echoing its first input, so "served - floor" is
what the runtime adds above its front end. The client is tritonclient's Python one (its cost is in every
figure; `bench/perf_analyzer.py` measures the same overhead with NVIDIA's C++ client).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ensemble_examples import onnx_models

from bench.common import closed_loop, summarize, write_json
from bench.pa.servers import FloorServer, Pinning
from tests.support.runtime_process import RuntimeProcess

CONFIG = """
name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: %d kind: KIND_CPU } ]
"""


def direct(session: ort.InferenceSession, feeds: dict[str, np.ndarray], concurrency: int, duration: float) -> dict[str, float]:
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration

    def worker() -> list[float]:
        out: list[float] = []
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            session.run(None, feeds)
            out.append(time.perf_counter() - t0)
        return out

    for _ in range(200):
        session.run(None, feeds)
    with ThreadPoolExecutor(concurrency) as pool:
        for part in pool.map(lambda _: worker(), range(concurrency)):
            latencies.extend(part)
    return summarize(latencies, duration)


def served_serial(url: str, feeds: dict[str, np.ndarray], duration: float) -> dict[str, float]:
    """One request in flight with the synchronous client: the lowest-overhead way to call."""
    inputs = []
    for name, array in feeds.items():
        item = grpcclient.InferInput(name, list(array.shape), "FP32")
        item.set_data_from_numpy(array)
        inputs.append(item)
    latencies: list[float] = []
    with grpcclient.InferenceServerClient(url) as client:
        for _ in range(200):
            client.infer("add_sub", inputs)
        stop_at = time.perf_counter() + duration
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            client.infer("add_sub", inputs)
            latencies.append(time.perf_counter() - t0)
    return summarize(latencies, duration)


async def served(url: str, feeds: dict[str, np.ndarray], concurrency: int, duration: float) -> dict[str, float]:
    client = grpcaio.InferenceServerClient(url)
    inputs = []
    for name, array in feeds.items():
        item = grpcaio.InferInput(name, list(array.shape), "FP32")
        item.set_data_from_numpy(array)
        inputs.append(item)

    async def call() -> object:
        return await client.infer("add_sub", inputs)

    try:
        return await closed_loop(call, concurrency, duration)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--instances", type=int, default=2)
    args = parser.parse_args()
    feeds = {"INPUT0": np.random.rand(1, 16).astype(np.float32), "INPUT1": np.random.rand(1, 16).astype(np.float32)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "add_sub" / "1").mkdir(parents=True)
        (root / "add_sub" / "config.pbtxt").write_text(CONFIG % args.instances)
        onnx_models.save(onnx_models.add_sub(), root / "add_sub" / "1" / "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(root / "add_sub" / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"])
        results: dict[str, dict[str, float]] = {}
        with FloorServer(Pinning()) as floor, \
                RuntimeProcess([root], ["--model-control-mode=explicit", "--load-model=add_sub"]) as proc:
            proc.wait_model_ready("add_sub")
            results["direct_c1"] = direct(session, feeds, 1, args.duration)
            results["floor_c1"] = served_serial(floor.grpc_url, feeds, args.duration)
            results["served_c1"] = served_serial(proc.grpc_url, feeds, args.duration)
            results["direct_c16"] = direct(session, feeds, 16, args.duration)
            results["floor_c16"] = asyncio.run(served(floor.grpc_url, feeds, 16, args.duration))
            results["served_c16"] = asyncio.run(served(proc.grpc_url, feeds, 16, args.duration))
    overhead = results["served_c1"]["p50_us"] - results["direct_c1"]["p50_us"]
    ours = results["served_c1"]["p50_us"] - results["floor_c1"]["p50_us"] - results["direct_c1"]["p50_us"]
    payload = {"model": "add_sub FP32[1,16] x2", "instances": args.instances, "results": results,
               "overhead_p50_us_at_1": round(overhead, 1), "runtime_own_p50_us_at_1": round(ours, 1),
               "target_overhead_p50_us": 150, "load_average": os.getloadavg()}
    print(f"{'case':<14}{'p50 us':>10}{'p99 us':>10}{'req/s':>10}")
    for case, row in results.items():
        print(f"{case:<14}{row['p50_us']:>10}{row['p99_us']:>10}{row['throughput_rps']:>10}")
    print(f"overhead at p50, 1 in flight: {overhead:.1f} us (target <= 150 us), of which the runtime's own "
          f"(above the floor: our gRPC core echoing): {ours:.1f} us; load average {os.getloadavg()[0]:.1f}")
    print(f"wrote {write_json('single_model', payload)}")


if __name__ == "__main__":
    main()
