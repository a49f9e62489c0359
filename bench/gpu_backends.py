"""GPU backends benchmark: served vs raw, same engine / same model, batch 1 and 64, in one run.

  * TensorRT: a plan built from an MLP ONNX with ensemble-build-plan's code; served (gRPC -> runtime ->
    tensorrt backend) vs raw TensorRT (execute_async_v3 on its own contexts and streams, pinned staging).
  * ONNX Runtime CUDA: the same ONNX served with a KIND_GPU instance group vs InferenceSession.run directly.

Throughput is inferences/s (requests/s x batch); ratio = served / raw. Writes bench/results/gpu_backends.json.
Needs an NVIDIA GPU with the gpu extra (tensorrt, onnxruntime-gpu, cuda-python); exits with a message otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import importlib
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ensemble_runtime.gpu.cuda import CudaRuntime, load_cudart
from ensemble_runtime.tools.build_plan import build, parse_args

from bench.common import closed_loop, summarize, write_json
from tests.support.runtime_process import RuntimeProcess

WIDTH, DEPTH = 1024, 4
BATCHES = (1, 64)
CONFIG = """
name: "{name}"
platform: "{platform}"
max_batch_size: 64
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ count: {instances} kind: KIND_GPU gpus: [ 0 ] }} ]
dynamic_batching {{ }}
"""


def mlp() -> onnx.ModelProto:
    """x FP32 [-1, WIDTH] -> DEPTH x (MatMul + Add + Relu) -> y: enough work per row for the GPU to matter."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(DEPTH):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(WIDTH, np.float32), f"b{i}")]
        out = "y" if i == DEPTH - 1 else f"h{i}"
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]), helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [out])]
        prev = out
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gpu_or_exit() -> CudaRuntime:
    try:
        cuda = CudaRuntime(load_cudart())
        if cuda.device_count() > 0:
            return cuda
        reason = "CUDA reports no device"
    except Exception as exc:
        reason = str(exc)
    sys.exit(f"gpu_backends: this benchmark needs an NVIDIA GPU and the gpu extra ({reason}); nothing measured")


def raw_trt(trt: Any, cuda: CudaRuntime, plan: bytes, batch: int, threads: int, duration: float) -> dict[str, float]:
    """Each thread: its own context (profile 0 shared, as TensorRT 10 allows), stream and buffers."""
    cuda.set_device(0)
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(plan)
    x = np.random.default_rng(batch).random((batch, WIDTH), np.float32)
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def worker() -> None:
        cuda.set_device(0)
        stream = cuda.create_stream()
        ctx = engine.create_execution_context()
        ctx.set_input_shape("x", x.shape)
        nbytes = x.nbytes
        host_in = int(cuda.call("cudaMallocHost", cuda.rt.cudaMallocHost(nbytes)))
        host_out = int(cuda.call("cudaMallocHost", cuda.rt.cudaMallocHost(nbytes)))
        dev_in = int(cuda.call("cudaMalloc", cuda.rt.cudaMalloc(nbytes)))
        dev_out = int(cuda.call("cudaMalloc", cuda.rt.cudaMalloc(nbytes)))
        ctx.set_tensor_address("x", dev_in)
        ctx.set_tensor_address("y", dev_out)
        mine: list[float] = []
        while not stop.is_set():
            t0 = time.perf_counter()
            np.copyto(np.ctypeslib.as_array((ctypes.c_float * x.size).from_address(host_in)), x.reshape(-1))
            cuda.copy_to_device(dev_in, host_in, nbytes, stream)
            ctx.execute_async_v3(int(stream))
            cuda.copy_to_host(host_out, dev_out, nbytes, stream)
            cuda.synchronize(stream)
            mine.append(time.perf_counter() - t0)
        for ptr in (dev_in, dev_out):
            cuda.call("cudaFree", cuda.rt.cudaFree(ptr))
        for ptr in (host_in, host_out):
            cuda.call("cudaFreeHost", cuda.rt.cudaFreeHost(ptr))
        cuda.destroy_stream(stream)
        with lock:
            latencies.extend(mine[len(mine) // 10 :])  # drop the warm-up tenth

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    time.sleep(duration)
    stop.set()
    for t in pool:
        t.join()
    return summarize(latencies, duration * 0.9)


def raw_ort(ort: Any, onnx_path: Path, batch: int, threads: int, duration: float) -> dict[str, float]:
    session = ort.InferenceSession(str(onnx_path), providers=[("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(batch).random((batch, WIDTH), np.float32)}
    for _ in range(20):
        session.run(None, feeds)
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + duration

    def worker() -> None:
        mine: list[float] = []
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            session.run(None, feeds)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return summarize(latencies, duration)


async def served(url: str, model: str, batch: int, concurrency: int, duration: float) -> dict[str, float]:
    grpcaio = importlib.import_module("tritonclient.grpc.aio")
    client = grpcaio.InferenceServerClient(url)
    item = grpcaio.InferInput("x", [batch, WIDTH], "FP32")
    item.set_data_from_numpy(np.random.default_rng(batch).random((batch, WIDTH), np.float32))

    async def call() -> object:
        return await client.infer(model, [item])

    try:
        return dict(await closed_loop(call, concurrency, duration))
    finally:
        await client.close()


def per_second(row: dict[str, float], batch: int) -> float:
    return round(row["throughput_rps"] * batch, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--instances", type=int, default=2)
    args = parser.parse_args()
    cuda = gpu_or_exit()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        onnx_path = root / "mlp.onnx"
        onnx.save(mlp(), str(onnx_path))
        for name, platform in (("mlp_trt", "tensorrt_plan"), ("mlp_ort", "onnxruntime_onnx")):
            (root / "repo" / name / "1").mkdir(parents=True)
            (root / "repo" / name / "config.pbtxt").write_text(
                CONFIG.format(name=name, platform=platform, width=WIDTH, instances=args.instances))
        (root / "repo" / "mlp_ort" / "1" / "model.onnx").write_bytes(onnx_path.read_bytes())
        trt = importlib.import_module("tensorrt")
        options = parse_args([str(onnx_path), "-o", str(root / "repo" / "mlp_trt" / "1" / "model.plan"),
                              "--min-shapes", f"x:1x{WIDTH}", "--opt-shapes", f"x:64x{WIDTH}", "--max-shapes", f"x:64x{WIDTH}"])
        plan = build(options, trt)
        options.output.write_bytes(plan)
        ort = importlib.import_module("onnxruntime")
        for batch in BATCHES:
            results[f"trt_raw_b{batch}"] = raw_trt(trt, cuda, plan, batch, args.instances, args.duration)
            results[f"ort_cuda_raw_b{batch}"] = raw_ort(ort, onnx_path, batch, args.instances, args.duration)
        with RuntimeProcess([root / "repo"], ["--model-control-mode=explicit", "--load-model=mlp_trt",
                                              "--load-model=mlp_ort"]) as proc:
            for model, key in (("mlp_trt", "trt"), ("mlp_ort", "ort_cuda")):
                try:
                    proc.wait_model_ready(model)
                except Exception as exc:
                    results[f"{key}_served_error"] = f"{model} did not become ready: {exc}"
                    continue
                for batch in BATCHES:
                    results[f"{key}_served_b{batch}"] = asyncio.run(
                        served(proc.grpc_url, model, batch, 2 * args.instances, args.duration))
    ratios: dict[str, float] = {}
    for key in ("trt", "ort_cuda"):
        for batch in BATCHES:
            raw, srv = results.get(f"{key}_raw_b{batch}"), results.get(f"{key}_served_b{batch}")
            if raw and srv:
                ratios[f"{key}_b{batch}"] = round(per_second(srv, batch) / per_second(raw, batch), 3)
    payload = {"model": f"MLP {DEPTH}x{WIDTH} FP32", "instances": args.instances, "device": "GPU 0",
               "results": results, "served_over_raw_throughput": ratios}
    print(f"{'case':<22}{'p50 us':>10}{'p99 us':>10}{'infer/s':>12}")
    for case, row in results.items():
        if isinstance(row, dict):
            batch = int(case.rsplit("_b", 1)[1])
            print(f"{case:<22}{row['p50_us']:>10}{row['p99_us']:>10}{per_second(row, batch):>12}")
        else:
            print(f"{case}: {row}")
    for case, ratio in ratios.items():
        print(f"served/raw throughput {case}: {ratio}")
    print(f"wrote {write_json('gpu_backends', payload)}")


if __name__ == "__main__":
    main()
